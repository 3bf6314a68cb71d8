// recorder/TraceBudget: the oldest bulk files go first, the newest never, a referenced one not
// while its referrers are kept; the trace's size is measured on the directory (every file counts).
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

// A bulk file a kept snapshot refers to (a frozen tensor stored once) is pinned: the next
// oldest goes instead, and it goes once nothing kept refers to it any more.
TEST(TraceBudget, ReferencedBulkIsPinnedUntilItsReferrersGo) {
  TempDir t;
  UniqueFd dir(::open(t.path.c_str(), O_RDONLY | O_DIRECTORY));
  TraceBudget b(2000, dir.get());
  const Hash128 frozen{1, 2}, other{3, 4};
  EXPECT_FALSE(b.reference(frozen));  // nothing kept holds it yet: the first snapshot writes it
  b.wrote(frozen);
  writeFile(dir.get(), "p1.bulk1.dlb", 800);
  b.addBulk({"p1.bulk1.dlb", 10, 800});
  for (int i = 2; i <= 3; ++i) {  // later snapshots refer to the frozen tensor in bulk1
    EXPECT_TRUE(b.reference(frozen));
    EXPECT_FALSE(b.reference(other));
    std::string name = "p1.bulk" + std::to_string(i) + kBulkExt;
    writeFile(dir.get(), name, 500);
    b.addBulk({name, i * 10, 500});
  }
  EXPECT_EQ(b.pinned(), 1u);
  uint64_t used = 0;
  auto dropped = b.makeRoom(0, used);  // 1800: fits
  EXPECT_TRUE(dropped.empty());
  dropped = b.makeRoom(300, used);  // bulk1 is pinned: bulk2 goes, which releases its pin only
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].file, "p1.bulk2.dlb");
  EXPECT_TRUE(exists(dir.get(), "p1.bulk1.dlb"));
  EXPECT_TRUE(b.makeRoom(1u << 30, used).empty());  // pinned by bulk3, the newest: all needed
  EXPECT_EQ(used, 1300u);
  // A snapshot being taken pins what it refers to at once (another thread may drop meanwhile).
  EXPECT_TRUE(b.reference(frozen));
  b.abandon();  // not written after all: the pin goes with it
  writeFile(dir.get(), "p1.bulk4.dlb", 500);
  b.addBulk({"p1.bulk4.dlb", 40, 500});  // refers to nothing: bulk3 is the last referrer
  dropped = b.makeRoom(1u << 30, used);
  ASSERT_EQ(dropped.size(), 2u);  // bulk3, then bulk1 once bulk3 no longer pins it
  EXPECT_EQ(dropped[0].file, "p1.bulk3.dlb");
  EXPECT_EQ(dropped[1].file, "p1.bulk1.dlb");
  EXPECT_FALSE(b.reference(frozen));  // its file is gone: a later snapshot writes it again
  EXPECT_EQ(listBulkFiles(dir.get(), "p1"), std::vector<std::string>{"p1.bulk4.dlb"});
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
