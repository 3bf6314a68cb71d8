// A trace can hold a job's environment and data: secrets are redacted before serialisation,
// files are private whatever the umask, and nothing planted in the trace directory is followed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "format/Redact.h"
#include "format/Trace.h"
#include "format/TraceDir.h"
#include "format/TraceError.h"
#include "support/SampleTrace.h"

namespace dlrr {
namespace {

using testing::makeTempDir;
using testing::readFile;
using testing::removeTree;
using testing::writeSampleTrace;
namespace fs = std::filesystem;

bool contains(const std::vector<uint8_t>& hay, const std::string& needle) {
  return std::search(hay.begin(), hay.end(), needle.begin(), needle.end()) != hay.end();
}

TEST(Security, SecretEnvironmentValuesNeverReachTheTrace) {
  EXPECT_TRUE(isSecretName("API_TOKEN", defaultRedactPatterns()));
  EXPECT_TRUE(isSecretName("aws_secret_access_key", defaultRedactPatterns()));
  EXPECT_FALSE(isSecretName("HOME", defaultRedactPatterns()));
  std::string root = makeTempDir("secrets");
  testing::SampleOptions o;
  o.env = {"HOME=/home/visible-home-dir", "API_TOKEN=hunter2-secret-value", "PATH=/usr/bin"};
  writeSampleTrace(root + "/t", o);
  bool sawVisible = false;
  for (const auto& e : fs::directory_iterator(root + "/t")) {
    auto bytes = readFile(e.path());
    EXPECT_FALSE(contains(bytes, "hunter2-secret-value")) << e.path();
    sawVisible |= contains(bytes, "/home/visible-home-dir");  // the check can see header text
  }
  EXPECT_TRUE(sawVisible);
  auto t = Trace::open(root + "/t");
  bool redacted = false;
  for (auto kv : t->launcher()->header().getTrace().getEnv())
    if (std::string(kv.getKey().cStr()) == "API_TOKEN") redacted = std::string(kv.getValue().cStr()) == kRedacted;
  EXPECT_TRUE(redacted);
  removeTree(root);
}

TEST(Security, TraceFilesArePrivateEvenWithUmaskZero) {
  std::string root = makeTempDir("umask");
  mode_t old = ::umask(0);
  writeSampleTrace(root + "/t");
  // An existing directory someone made world-writable is tightened too.
  ASSERT_EQ(::mkdir((root + "/open").c_str(), 0777), 0);
  ASSERT_EQ(::chmod((root + "/open").c_str(), 0777), 0);
  UniqueFd fd = createTraceDir(root + "/open");
  ::umask(old);
  struct stat st {};
  ASSERT_EQ(::stat((root + "/t").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  ASSERT_EQ(::stat((root + "/open").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  int files = 0;
  for (const auto& e : fs::directory_iterator(root + "/t")) {
    ASSERT_EQ(::stat(e.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u) << e.path();
    ++files;
  }
  EXPECT_EQ(files, 2);
  removeTree(root);
}

TEST(Security, SymlinksPlantedInTheTraceDirectoryAreNotFollowed) {
  std::string root = makeTempDir("symlink");
  std::string victim = root + "/victim";
  testing::writeFile(victim, {'o', 'r', 'i', 'g'});
  std::string dir = root + "/t";
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(victim.c_str(), (dir + "/p101.dls").c_str()), 0);
  // Writing: the planted name is skipped (O_EXCL never follows), the victim is untouched.
  auto res = writeSampleTrace(dir);
  EXPECT_EQ(res.processStream, "p101.1.dls");
  EXPECT_EQ(readFile(victim), (std::vector<uint8_t>{'o', 'r', 'i', 'g'}));
  // Reading: refused by name, never read through.
  try {
    Trace::open(dir);
    ADD_FAILURE() << "read through a symlink";
  } catch (const TraceError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::NotATrace);
    EXPECT_NE(std::string(e.what()).find("symbolic link"), std::string::npos) << e.what();
  }
  auto t = Trace::open(dir, OpenMode::Tolerant);
  ASSERT_EQ(t->broken().size(), 1u);
  EXPECT_EQ(t->broken()[0].name, "p101");
  EXPECT_NE(t->find("p101.1"), nullptr);
  // A symlink in place of the trace directory itself is refused for writing.
  ASSERT_EQ(::symlink(dir.c_str(), (root + "/link").c_str()), 0);
  EXPECT_THROW(createTraceDir(root + "/link"), TraceError);
  removeTree(root);
}

TEST(Security, AFifoNamedLikeAStreamDoesNotHangTheReader) {
  std::string root = makeTempDir("fifo");
  writeSampleTrace(root + "/t");
  ASSERT_EQ(::mkfifo((root + "/t/p200.dls").c_str(), 0600), 0);
  EXPECT_THROW(Trace::open(root + "/t"), TraceError);  // would block in open() without O_NONBLOCK
  auto t = Trace::open(root + "/t", OpenMode::Tolerant);
  ASSERT_EQ(t->broken().size(), 1u);
  EXPECT_EQ(t->broken()[0].kind, ErrorKind::NotATrace);
  removeTree(root);
}

// Issue 27: values are judged by their shape too, whatever the variable's name.
TEST(Security, TokenShapedValuesAndUrlUserInfoAreRedacted) {
  bool changed = false;
  EXPECT_EQ(redactValue("postgres://user:pw-secret@db.example:5432/app", changed),
            "postgres://<redacted>@db.example:5432/app");
  EXPECT_TRUE(changed);
  EXPECT_EQ(redactValue("ghp_abcdefghijklmnopqrstuvwxyz0123456789", changed), "<redacted>");
  EXPECT_EQ(redactValue("--token=hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345", changed), "--token=<redacted>");
  EXPECT_EQ(redactValue("Bearer sk-proj-AbCdEf0123456789xyz", changed), "Bearer <redacted>");
  EXPECT_EQ(redactValue("AKIAIOSFODNN7EXAMPLE", changed), "<redacted>");
  EXPECT_EQ(redactValue("xoxb-123456789012-abcdefghijkl", changed), "<redacted>");
  EXPECT_EQ(redactValue("Zx8Kq2Lm9Pw4Rt7Yv1Bn6Hj3Gf5Dd0Ss", changed), "<redacted>");  // long and random
  // What is not a credential stays: paths, hex digests, UUIDs, ordinary words and numbers.
  for (const char* keep : {"/usr/lib/python3/dist-packages:/home/u/src", "https://github.com/org/repo.git",
                           "0123456789abcdef0123456789abcdef01234567", "123e4567-e89b-12d3-a456-426614174000",
                           "--lr=0.001", "train.py", "en_US.UTF-8", "skip-connections"}) {
    EXPECT_EQ(redactValue(keep, changed), keep) << keep;
    EXPECT_FALSE(changed) << keep;
  }
  // --redact adds to the defaults, with or without '+'.
  for (const char* spec : {"FOO", "+FOO"}) {
    auto p = parseRedactPatterns(spec);
    EXPECT_TRUE(isSecretName("FOO_VAR", p)) << spec;
    EXPECT_TRUE(isSecretName("MY_TOKEN", p)) << spec;
  }
  EXPECT_TRUE(isSecretName("SLACK_WEBHOOK_URL", defaultRedactPatterns()));
}

TEST(Security, CredentialFilesAreKnownByTheirPaths) {
  for (const char* p : {"/home/u/.netrc", "/home/u/.aws/credentials", "/root/.ssh/id_ed25519",
                        "/home/u/.config/gcloud/application_default_credentials.json", "/home/u/.docker/config.json",
                        "/home/u/.git-credentials", "/home/u/.kaggle/kaggle.json", "/home/u/.cache/huggingface/token",
                        "/work/proj/.env", "/work/proj/.env.local", "/etc/tls/server.pem", "/work/proj/server.key"})
    EXPECT_TRUE(isCredentialPath(p)) << p;
  for (const char* p : {"/data/train.csv", "/home/u/.cache/torch/hub/x.pt", "/work/proj/environment.yml",
                        "/data/keys.npy", "/work/proj/monkey.txt"})
    EXPECT_FALSE(isCredentialPath(p)) << p;
}

}  // namespace
}  // namespace dlrr
