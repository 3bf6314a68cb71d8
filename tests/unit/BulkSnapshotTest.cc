// Periodic snapshots of a budgeted trace in bulk files (recorder/TraceBudget.h): a tensor a kept
// bulk file holds already is referenced there, not rewritten, and a kept snapshot never refers
// to dropped bytes; a stream that uses bulk files says format 2, others 1 (format/Frame.h).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "format/Frame.h"
#include "format/StreamReader.h"
#include "format/Trace.h"
#include "format/TraceDir.h"
#include "format/TraceError.h"
#include "format/ValueBlobs.h"
#include "recorder/RecordSession.h"
#include "support/SampleTrace.h"

namespace dlrr {
namespace {

constexpr size_t kTensor = 64 << 10;  // bytes of each tensor of a snapshot

Config budgetConfig(const std::string& dir, uint64_t budget) {
  Config c;
  c.mode = Mode::Record;
  c.traceDir = dir;
  c.budget = budget;
  return c;
}

// One periodic snapshot {frozen, trained}: `frozen` is the same every time, `trained` not.
void snapshot(RecordSession& s, int64_t step, const std::vector<uint8_t>& frozen, const std::vector<uint8_t>& trained) {
  s.snapshotBegin(step, false, false);
  BatchBuilder& b = s.batchBuilder();
  b.dict(2);
  int64_t shape[1] = {static_cast<int64_t>(kTensor)};
  b.key("frozen");
  s.batchTensor("uint8", 1, 1, shape, frozen.data(), frozen.size(), "cpu", false);
  b.key("trained");
  s.batchTensor("uint8", 1, 1, shape, trained.data(), trained.size(), "cpu", true);
  s.batchEnd();
}

// Incompressible bytes (zstd would make a tensor of equal bytes free).
std::vector<uint8_t> noise(uint64_t seed) {
  std::vector<uint8_t> v(kTensor);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& b : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

// Records `steps` steps with a snapshot at each, under `budget`; returns the process stream's
// file name.
std::string record(const std::string& dir, uint64_t budget, int steps, bool snapshots = true) {
  std::vector<uint8_t> frozen = noise(1000);
  RecordSession s(budgetConfig(dir, budget));
  for (int step = 0; step < steps; ++step) {
    s.stepBegin(step, 0, static_cast<uint64_t>(step), 0);
    if (snapshots) {
      snapshot(s, step, frozen, noise(static_cast<uint64_t>(step)));
    }
    s.stepEnd(step, 1.0);
  }
  s.onExit(true, 0);
  auto t = Trace::open(dir);
  return t->mainStream()->name() + kStreamExt;
}

uint16_t majorOf(const std::string& path) {
  auto bytes = testing::readFile(path);
  auto info = decodeFileHeader(bytes.data());
  return info ? info->major : 0;
}

TEST(BulkSnapshot, FrozenTensorsStoredOnceAndKeptSnapshotsWhole) {
  std::string root = testing::makeTempDir("bulk");
  std::string dir = root + "/t";
  constexpr uint64_t kBudget = 640 << 10;  // 16 snapshots of 128 KiB each would be 2 MiB
  std::string file = record(dir, kBudget, 16);
  UniqueFd dirFd = openTraceDir(dir);
  EXPECT_LE(traceBytes(dirFd.get()), kBudget);
  std::string stem = file.substr(0, file.size() - std::strlen(kStreamExt));
  auto bulk = listBulkFiles(dirFd.get(), stem);
  ASSERT_GE(bulk.size(), 2u);
  EXPECT_LT(bulk.size(), 16u);  // some were dropped

  auto t = Trace::open(dir);
  StreamReader* r = t->mainStream();
  std::set<int64_t> droppedSteps;
  std::vector<std::pair<int64_t, bool>> snaps;  // step, whole
  Hash128 frozenHash{};
  r->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
    if (e.isNote()) {
      std::string n = e.getNote().cStr();
      std::string prefix = "budget: dropped the snapshot of step ";
      if (n.rfind(prefix, 0) == 0) droppedSteps.insert(std::stoll(n.substr(prefix.size())));
    }
    if (!e.isSnapshot()) return;
    auto sn = e.getSnapshot();
    snaps.emplace_back(sn.getStep(), valueBlobsPresent(*r, sn.getValue()));
    auto ref = sn.getValue().getDict()[0].getValue().getTensor().getData();
    frozenHash = Hash128{ref.getHashLo(), ref.getHashHi()};
    // After the first, a snapshot's new bytes are its trained tensor only.
    if (sn.getStep() > 0) {
      EXPECT_EQ(sn.getNewBytes(), kTensor) << sn.getStep();
    }
  });
  ASSERT_EQ(snaps.size(), 16u);
  EXPECT_FALSE(droppedSteps.empty());
  // Every snapshot not dropped is whole: its bytes, those it refers to in older files included.
  for (auto [step, whole] : snaps) {
    EXPECT_EQ(whole, droppedSteps.count(step) == 0) << "step " << step;
  }
  EXPECT_TRUE(snaps.back().second);  // the newest is kept
  // And readable: every blob of the newest and of the oldest kept snapshot reads back whole.
  auto oldestKept = std::find_if(snaps.begin(), snaps.end(), [](const auto& s) { return s.second; });
  ASSERT_NE(oldestKept, snaps.end());
  r->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
    if (!e.isSnapshot()) return;
    int64_t step = e.getSnapshot().getStep();
    if (step != oldestKept->first && step != snaps.back().first) return;
    for (auto kv : e.getSnapshot().getValue().getDict()) {
      auto ref = kv.getValue().getTensor().getData();
      EXPECT_EQ(r->readBlob(Hash128{ref.getHashLo(), ref.getHashHi()}, ref.getSize()).size(), kTensor);
    }
  });
  // The frozen tensor is in one bulk file only (the first snapshot's, pinned while referred to).
  int holders = 0;
  for (const auto& b : bulk) {
    auto br = StreamReader::open(dirFd.get(), b, b);
    holders += br->hasBlob(frozenHash) ? 1 : 0;
  }
  EXPECT_EQ(holders, 1);
  EXPECT_EQ(bulk.front(), stem + ".bulk1.dlb");
  testing::removeTree(root);
}

TEST(BulkSnapshot, FormatMajorTwoExactlyWhenBulkFilesAreUsed) {
  std::string root = testing::makeTempDir("bulkv");
  // Snapshots under a budget: bulk files, and the stream and they say 2.
  std::string file = record(root + "/bulk", 64 << 20, 3);
  EXPECT_EQ(majorOf(root + "/bulk/" + file), 2);
  {
    UniqueFd d = openTraceDir(root + "/bulk");
    auto bulk = listBulkFiles(d.get(), file.substr(0, file.size() - std::strlen(kStreamExt)));
    ASSERT_EQ(bulk.size(), 3u);
    for (const auto& b : bulk) {
      EXPECT_EQ(majorOf(root + "/bulk/" + b), 2) << b;
    }
  }
  auto t = Trace::open(root + "/bulk");
  EXPECT_EQ(t->summarize().formatVersion, "2.0");
  // A budget but no snapshot, and snapshots without a budget (in the stream): 1, as before.
  std::string plain = record(root + "/nosnap", 64 << 20, 3, false);
  EXPECT_EQ(majorOf(root + "/nosnap/" + plain), 1);
  std::string nobudget = record(root + "/nobudget", 0, 3);
  EXPECT_EQ(majorOf(root + "/nobudget/" + nobudget), 1);
  EXPECT_EQ(Trace::open(root + "/nobudget")->summarize().formatVersion, "1.0");
  {
    UniqueFd d = openTraceDir(root + "/nobudget");
    EXPECT_TRUE(listBulkFiles(d.get(), nobudget.substr(0, nobudget.size() - std::strlen(kStreamExt))).empty());
  }
  // A reader from before bulk files (major 1) refuses the bulk stream, reads the others.
  auto header = [](const std::string& path) { return *decodeFileHeader(testing::readFile(path).data()); };
  try {
    checkFormatVersion(header(root + "/bulk/" + file), file, 1);
    ADD_FAILURE() << "a major-1 reader accepted a stream with bulk files";
  } catch (const TraceError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::FutureVersion);
    EXPECT_NE(std::string(e.what()).find("upgrade dlrr"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(checkFormatVersion(header(root + "/nobudget/" + nobudget), nobudget, 1));
  EXPECT_NO_THROW(checkFormatVersion(header(root + "/bulk/" + file), file));  // this reader: 2
  testing::removeTree(root);
}

}  // namespace
}  // namespace dlrr
