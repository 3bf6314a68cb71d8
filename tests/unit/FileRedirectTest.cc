// Data-less replay's file overlay (replayer/FileRedirect) on a real directory tree, and the
// path rules shared with recording (session/FilePaths). Outside the preloaded library the
// calls here are libc's own, so the overlay's decisions are tested as they are.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "replayer/FileRedirect.h"
#include "replayer/FileServer.h"
#include "session/FilePaths.h"
#include "tests/support/SampleTrace.h"

namespace dlrr {
namespace {

std::string slurp(const std::string& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void put(const std::string& p, const std::string& text) { std::ofstream(p) << text; }

bool exists(const std::string& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

TEST(FilePaths, NormalisesAndRecognisesSystemPaths) {
  EXPECT_EQ(lexicallyNormal("/a//b/./c/../d/"), "/a/b/d");
  EXPECT_EQ(lexicallyNormal("/../.."), "/");
  EXPECT_EQ(absolutePath(AT_FDCWD, "/x/../y"), "/y");
  EXPECT_EQ(absolutePath(AT_FDCWD, ""), "");
  EXPECT_TRUE(pathUnder("/data/x", "/data"));
  EXPECT_TRUE(pathUnder("/data", "/data/"));
  EXPECT_FALSE(pathUnder("/database", "/data"));
  EXPECT_TRUE(isSystemPath("/usr/lib/python3.11/os.py"));
  EXPECT_TRUE(isSystemPath("/opt/venv/lib/python3.12/site-packages/torch/__init__.py"));
  EXPECT_TRUE(isSystemPath("/proc/self/maps"));
  EXPECT_TRUE(isSystemPath("/job/__pycache__/m.cpython-311.pyc"));
  EXPECT_FALSE(isSystemPath("/usr/share/fashion-mnist/train-images-idx3-ubyte.gz"));
  EXPECT_FALSE(isSystemPath("/home/u/data/labels.json"));
  EXPECT_FALSE(isSystemPath("/libraries/data.csv"));
}

class FileRedirectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::makeTempDir("redirect");
    scratch_ = root_ + "/scratch";
    user_ = root_ + "/user";
    makeScratch(scratch_);
    std::filesystem::create_directories(user_ + "/ckpt");
    put(user_ + "/ckpt/a.pt", "recorded");
    put(user_ + "/log.txt", "line1\n");
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  std::string root_, scratch_, user_;
};

TEST_F(FileRedirectTest, ExcludesKernelFilesScratchAndTrace) {
  FileRedirect fr(scratch_, root_ + "/trace", ServeFiles::Missing);
  EXPECT_EQ(fr.resolve(AT_FDCWD, "/dev/shm/torch_1"), "");
  EXPECT_EQ(fr.resolve(AT_FDCWD, "/proc/self/status"), "");
  EXPECT_EQ(fr.resolve(AT_FDCWD, (scratch_ + "/written/x").c_str()), "");
  EXPECT_EQ(fr.resolve(AT_FDCWD, (root_ + "/trace/p1.dls").c_str()), "");
  EXPECT_EQ(fr.resolve(AT_FDCWD, (user_ + "/./ckpt/../log.txt").c_str()), user_ + "/log.txt");
}

TEST_F(FileRedirectTest, ServesOnlyWhereThePathIsMissingUnlessAlways) {
  std::filesystem::create_directories(scratch_ + "/served" + user_);
  put(scratch_ + "/served" + user_ + "/log.txt", "served");
  put(scratch_ + "/served" + user_ + "/gone.json", "{}");
  FileRedirect fr(scratch_, "", ServeFiles::Missing);
  std::string fallback;
  EXPECT_EQ(fr.forRead(user_ + "/log.txt", fallback), "");         // the user's own file is used
  EXPECT_EQ(fallback, scratch_ + "/served" + user_ + "/log.txt");  // only if it were missing
  FileRedirect always(scratch_, "", ServeFiles::Always);
  EXPECT_EQ(always.forRead(user_ + "/log.txt", fallback), scratch_ + "/served" + user_ + "/log.txt");
  FileRedirect never(scratch_, "", ServeFiles::Never);
  EXPECT_EQ(never.forRead(user_ + "/gone.json", fallback), "");
  EXPECT_EQ(fallback, "");
}

TEST_F(FileRedirectTest, WritesGoToTheScratchCopyAndLaterReadsSeeIt) {
  FileRedirect fr(scratch_, "", ServeFiles::Missing);
  int err = 0;
  std::string w = fr.forWrite(user_ + "/log.txt", O_WRONLY | O_APPEND, err);
  ASSERT_EQ(w, scratch_ + "/written" + user_ + "/log.txt");
  EXPECT_EQ(slurp(w), "line1\n");  // copied before it is appended to
  put(w, "line1\nline2\n");
  std::string fallback;
  EXPECT_EQ(fr.forRead(user_ + "/log.txt", fallback), w);
  EXPECT_EQ(slurp(user_ + "/log.txt"), "line1\n");  // the user's is untouched
  // Truncating writes start empty; a new file needs its directory to exist (as the job sees it).
  w = fr.forWrite(user_ + "/ckpt/a.pt", O_WRONLY | O_CREAT | O_TRUNC, err);
  EXPECT_TRUE(exists(scratch_ + "/written" + user_ + "/ckpt"));
  EXPECT_EQ(slurp(w), "");  // made empty, nothing copied
  // O_TRUNC without O_CREAT on an existing file (filelock's lock files): the copy exists to open.
  std::filesystem::create_directories(user_ + "/locks");
  put(user_ + "/locks/k.lock", "");
  w = fr.forWrite(user_ + "/locks/k.lock", O_RDWR | O_TRUNC, err);
  ASSERT_EQ(w, scratch_ + "/written" + user_ + "/locks/k.lock");
  EXPECT_TRUE(exists(w));
  EXPECT_EQ(fr.forWrite(user_ + "/nodir/x.pt", O_WRONLY | O_CREAT, err), "");
  EXPECT_EQ(err, ENOENT);
  EXPECT_EQ(fr.forWrite(user_ + "/ckpt/a.pt", O_WRONLY | O_CREAT | O_EXCL, err), "");
  EXPECT_EQ(err, EEXIST);
  EXPECT_EQ(fr.forWrite(user_ + "/missing.txt", O_WRONLY, err), "");
  EXPECT_EQ(err, ENOENT);
  // An existing file opened O_RDWR|O_TRUNC without O_CREAT (filelock's lock files, inductor):
  // the real open that follows needs the scratch copy to exist, empty.
  put(user_ + "/x.lock", "held");
  w = fr.forWrite(user_ + "/x.lock", O_RDWR | O_TRUNC, err);
  ASSERT_EQ(w, scratch_ + "/written" + user_ + "/x.lock");
  int fd = ::open(w.c_str(), O_RDWR | O_TRUNC | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ::close(fd);
  EXPECT_EQ(slurp(w), "");
  EXPECT_EQ(slurp(user_ + "/x.lock"), "held");
}

TEST_F(FileRedirectTest, MkdirRenameAndRemoveLeaveTheUsersFilesAlone) {
  FileRedirect fr(scratch_, "", ServeFiles::Missing);
  EXPECT_EQ(fr.mkdir(user_ + "/ckpt", 0755), -1);
  EXPECT_EQ(errno, EEXIST);
  ASSERT_EQ(fr.mkdir(user_ + "/out", 0755), 0);
  EXPECT_FALSE(exists(user_ + "/out"));
  int err = 0;
  put(fr.forWrite(user_ + "/out/tmp.pt", O_WRONLY | O_CREAT | O_TRUNC, err), "new");
  ASSERT_EQ(fr.rename(user_ + "/out/tmp.pt", user_ + "/ckpt/a.pt"), 0);  // over the user's file
  EXPECT_EQ(slurp(user_ + "/ckpt/a.pt"), "recorded");
  std::string fallback;
  EXPECT_EQ(slurp(fr.forRead(user_ + "/ckpt/a.pt", fallback)), "new");
  std::string gone = fr.forRead(user_ + "/out/tmp.pt", fallback);
  EXPECT_FALSE(exists(gone.empty() ? user_ + "/out/tmp.pt" : gone));
  // Removing the user's file hides it from the replay only.
  ASSERT_EQ(fr.remove(user_ + "/log.txt", false), 0);
  EXPECT_TRUE(exists(user_ + "/log.txt"));
  std::string hidden = fr.forRead(user_ + "/log.txt", fallback);
  ASSERT_NE(hidden, "");
  EXPECT_FALSE(exists(hidden));
  EXPECT_EQ(fr.remove(user_ + "/log.txt", false), -1);
  EXPECT_EQ(errno, ENOENT);
  // Renaming a user's file: a copy under the new name, the old one hidden, the user's intact.
  ASSERT_EQ(fr.rename(user_ + "/ckpt/a.pt", user_ + "/ckpt/b.pt"), 0);
  EXPECT_EQ(slurp(fr.forRead(user_ + "/ckpt/b.pt", fallback)), "new");
  EXPECT_EQ(slurp(user_ + "/ckpt/a.pt"), "recorded");
  EXPECT_FALSE(exists(user_ + "/ckpt/b.pt"));
  // Everything is in the log dlreplay reports from.
  ServedTree tree;
  FilesReport r = readFilesReport(scratch_, tree);
  EXPECT_EQ(r.dirs, std::vector<std::string>{user_ + "/out"});
  EXPECT_EQ(r.deleted, std::vector<std::string>{user_ + "/log.txt"});
  ASSERT_EQ(r.renamed.size(), 2u);
  EXPECT_EQ(r.renamed[0], user_ + "/out/tmp.pt -> " + user_ + "/ckpt/a.pt");
}

TEST_F(FileRedirectTest, NewNamesAreMadeInTheScratchOnly) {
  FileRedirect fr(scratch_, "", ServeFiles::Missing);
  ASSERT_EQ(fr.link(user_ + "/log.txt", user_ + "/log.bak"), 0);
  EXPECT_FALSE(exists(user_ + "/log.bak"));
  std::string fallback;
  EXPECT_EQ(slurp(fr.forRead(user_ + "/log.bak", fallback)), "line1\n");
  struct stat a {
  }, b{};
  ::stat((user_ + "/log.txt").c_str(), &a);
  ::stat((scratch_ + "/written" + user_ + "/log.bak").c_str(), &b);
  EXPECT_NE(a.st_ino, b.st_ino);  // a copy: writing through the new name cannot reach the user's file
  EXPECT_EQ(a.st_nlink, 1u);
  ASSERT_EQ(fr.symlink("ckpt/a.pt", user_ + "/latest.pt"), 0);
  EXPECT_FALSE(exists(user_ + "/latest.pt"));
  EXPECT_EQ(fr.symlink("x", user_ + "/log.txt"), -1);
  EXPECT_EQ(errno, EEXIST);
}

TEST_F(FileRedirectTest, AScratchWithAnEarlierReplayIsRefused) {
  EXPECT_THROW(makeScratch(scratch_), std::runtime_error);
  std::filesystem::create_directories(root_ + "/empty");
  EXPECT_NO_THROW(makeScratch(root_ + "/empty"));
}

TEST(FileServer, SummarizesAFewPaths) {
  EXPECT_EQ(summarizePaths({"/a", "/b", "/c"}, 2), "/a, /b, ... (1 more)");
  EXPECT_EQ(summarizePaths({"/a"}, 2), "/a");
}

}  // namespace
}  // namespace dlrr
