// recorder/TraceBudget: the oldest bulk files go first, the newest never; the trace's size is
// measured on the directory (every file counts).
#include <capnp/message.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "format/StreamHeaderBuilder.h"
#include "format/StreamReader.h"
#include "format/StreamWriter.h"
#include "format/TraceDir.h"
#include "recorder/TraceBudget.h"

namespace dlrr {
namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/dlrr-budget-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

void writeFile(int dir, const std::string& name, size_t n) {
  int fd = ::openat(dir, name.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  std::string bytes(n, 'x');
  ASSERT_EQ(::write(fd, bytes.data(), n), static_cast<ssize_t>(n));
  ::close(fd);
}

bool exists(int dir, const std::string& name) { return ::faccessat(dir, name.c_str(), F_OK, 0) == 0; }

TEST(TraceBudget, DropsOldestBulkKeepsNewest) {
  TempDir t;
  UniqueFd dir(::open(t.path.c_str(), O_RDONLY | O_DIRECTORY));
  writeFile(dir.get(), "p1.dls", 1000);
  writeFile(dir.get(), "launcher.dls", 100);
  TraceBudget b(3000, dir.get());
  for (int i = 1; i <= 3; ++i) {
    std::string name = "p1.bulk" + std::to_string(i) + kBulkExt;
    writeFile(dir.get(), name, 800);
    b.addBulk({name, i * 10, 800});
  }
  EXPECT_EQ(b.used(), 3500u);
  uint64_t used = 0;
  auto dropped = b.makeRoom(0, used);
  ASSERT_EQ(dropped.size(), 1u);  // 3500 -> 2700: one is enough
  EXPECT_EQ(dropped[0].step, 10);
  EXPECT_EQ(used, 2700u);
  EXPECT_FALSE(exists(dir.get(), "p1.bulk1.dlb"));
  // Room for 2000 more: everything but the newest goes, and the rest is the caller's to judge.
  dropped = b.makeRoom(2000, used);
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].step, 20);
  EXPECT_EQ(used, 1900u);
  EXPECT_TRUE(exists(dir.get(), "p1.bulk3.dlb"));
  EXPECT_TRUE(b.makeRoom(1u << 30, used).empty());  // never the newest
  EXPECT_EQ(listBulkFiles(dir.get(), "p1"), std::vector<std::string>{"p1.bulk3.dlb"});
}

TEST(TraceBudget, BulkFilesAreNamedAndListedInOrder) {
  TempDir t;
  UniqueFd dir(::open(t.path.c_str(), O_RDONLY | O_DIRECTORY));
  std::string a, b, c;
  createBulkFile(dir.get(), "p7", 9, a);
  createBulkFile(dir.get(), "p7", 9, b);  // taken: the next
  createBulkFile(dir.get(), "p7", 10, c);
  EXPECT_EQ(a, "p7.bulk9.dlb");
  EXPECT_EQ(b, "p7.bulk10.dlb");
  EXPECT_EQ(c, "p7.bulk11.dlb");
  writeFile(dir.get(), "p7.bulkx.dlb", 1);  // not one of its names
  writeFile(dir.get(), "p70.bulk1.dlb", 1);
  EXPECT_EQ(listBulkFiles(dir.get(), "p7"),
            (std::vector<std::string>{"p7.bulk9.dlb", "p7.bulk10.dlb", "p7.bulk11.dlb"}));
  EXPECT_EQ(listStreams(dir.get()), std::vector<std::string>{});  // bulk files are not streams
}

// A stream's reader finds blobs in its bulk files, and no longer once one is dropped.
TEST(TraceBudget, ReaderLooksInBulkFiles) {
  TempDir t;
  UniqueFd dir(::open(t.path.c_str(), O_RDONLY | O_DIRECTORY));
  const std::string blob = "tensor bytes of a snapshot";
  Hash128 h{};
  {
    std::string name;
    capnp::MallocMessageBuilder hm;
    initStreamHeader(hm, "p1", schema::StreamHeader::Role::PROCESS);
    StreamWriter w(createStreamFile(dir.get(), "p1", name), hm);
    w.close();
    capnp::MallocMessageBuilder bm;
    initStreamHeader(bm, "p1.bulk1", schema::StreamHeader::Role::PROCESS);
    StreamWriter b(createBulkFile(dir.get(), "p1", 1, name), bm);
    h = b.putBlob(blob.data(), blob.size()).hash;
    b.close();
  }
  auto r = StreamReader::open(dir.get(), "p1.dls", "p1");
  ASSERT_TRUE(r->hasBlob(h));
  auto bytes = r->readBlob(h, blob.size());
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), blob);
  EXPECT_EQ(r->bulkFiles(), std::vector<std::string>{"p1.bulk1.dlb"});
  ASSERT_EQ(::unlinkat(dir.get(), "p1.bulk1.dlb", 0), 0);
  auto after = StreamReader::open(dir.get(), "p1.dls", "p1");
  EXPECT_FALSE(after->hasBlob(h));
}

}  // namespace
}  // namespace dlrr
