// The replay's comparison of one step's kernel launches, and device digests compared like
// with like.
#include <gtest/gtest.h>

#include <cmath>

#include "format/Trace.h"
#include "recorder/RecordSession.h"
#include "replayer/LaunchCompare.h"
#include "replayer/ReplaySession.h"
#include "support/SampleTrace.h"

namespace dlrr {
namespace {

KernelLaunch k(uint32_t seq, const std::string& name, uint32_t gx = 1, uint32_t bx = 128, uint32_t smem = 0,
               uint32_t flags = 8) {
  KernelLaunch l;
  l.seq = seq;
  l.name = name;
  l.grid[0] = gx, l.grid[1] = 1, l.grid[2] = 1;
  l.block[0] = bx, l.block[1] = 1, l.block[2] = 1;
  l.sharedMem = smem;
  l.flags = flags;
  return l;
}

TEST(LaunchCompare, IdenticalSequencesMatchWhateverTheirDeliveryOrder) {
  std::vector<KernelLaunch> rec = {k(0, "a"), k(1, "b"), k(2, "c")};
  std::vector<KernelLaunch> rep = {k(2, "c"), k(0, "a"), k(1, "b")};  // drained from two threads
  LaunchComparison c = compareLaunches(4, rec, rep, true);
  EXPECT_TRUE(c.match);
  EXPECT_EQ(c.compared, 3u);
  EXPECT_FALSE(c.truncated);
}

TEST(LaunchCompare, FirstDifferenceByNameGridBlockOrSharedMemory) {
  std::vector<KernelLaunch> rec = {k(0, "a"), k(1, "_Z7dropoutPf", 80), k(2, "c")};
  LaunchComparison byGrid = compareLaunches(3, rec, {k(0, "a"), k(1, "_Z7dropoutPf", 66), k(2, "c")}, true);
  EXPECT_FALSE(byGrid.match);
  ASSERT_TRUE(byGrid.position);
  EXPECT_EQ(*byGrid.position, 1u);
  EXPECT_EQ(
      byGrid.detail,
      "launch 1 of step 3: recorded dropout(float*) grid (80,1,1) block (128,1,1) smem 0; replayed dropout(float*) "
      "grid (66,1,1) block (128,1,1) smem 0");
  LaunchComparison byName = compareLaunches(3, rec, {k(0, "z"), k(1, "_Z7dropoutPf", 80), k(2, "c")}, true);
  EXPECT_EQ(*byName.position, 0u);
  LaunchComparison bySmem = compareLaunches(3, rec, {k(0, "a"), k(1, "_Z7dropoutPf", 80), k(2, "c", 1, 128, 48)}, true);
  EXPECT_EQ(*bySmem.position, 2u);
  LaunchComparison byBlock = compareLaunches(3, rec, {k(0, "a", 1, 64), k(1, "_Z7dropoutPf", 80), k(2, "c")}, true);
  EXPECT_EQ(*byBlock.position, 0u);
}

TEST(LaunchCompare, UnknownGeometryComparesNamesOnly) {
  LaunchComparison c = compareLaunches(0, {k(0, "a", 5, 5, 0, 0)}, {k(0, "a", 7, 7)}, true);
  EXPECT_TRUE(c.match);
}

TEST(LaunchCompare, LengthsDifferOnlyOnceTheStepEnded) {
  std::vector<KernelLaunch> rec = {k(0, "a"), k(1, "b"), k(2, "c")};
  LaunchComparison shorter = compareLaunches(1, rec, {k(0, "a"), k(1, "b")}, true);
  EXPECT_FALSE(shorter.match);
  EXPECT_EQ(*shorter.position, 2u);
  EXPECT_NE(shorter.detail.find("recorded 3 kernel launches, replayed 2; first unmatched launch 2: recorded c"),
            std::string::npos)
      << shorter.detail;
  LaunchComparison longer = compareLaunches(1, rec, {k(0, "a"), k(1, "b"), k(2, "c"), k(3, "d")}, true);
  EXPECT_FALSE(longer.match);
  EXPECT_NE(longer.detail.find("replayed d"), std::string::npos) << longer.detail;
  // A stop in the middle of the step: the prefix so far matches.
  LaunchComparison prefix = compareLaunches(1, rec, {k(0, "a"), k(1, "b")}, false);
  EXPECT_TRUE(prefix.match);
  EXPECT_EQ(prefix.compared, 2u);
  LaunchComparison beyond = compareLaunches(1, {k(0, "a")}, {k(0, "a"), k(1, "b")}, false);
  EXPECT_FALSE(beyond.match);
}

TEST(LaunchCompare, ADropGapLimitsTheComparisonToThePrefix) {
  // Records 2 and 3 were lost at record time (a full ring): compare 0..1 only, say so.
  std::vector<KernelLaunch> rec = {k(0, "a"), k(1, "b"), k(4, "e")};
  LaunchComparison c = compareLaunches(0, rec, {k(0, "a"), k(1, "b"), k(2, "x"), k(3, "y"), k(4, "e")}, true);
  EXPECT_TRUE(c.match);
  EXPECT_TRUE(c.truncated);
  EXPECT_EQ(c.compared, 2u);
  LaunchComparison bad = compareLaunches(0, rec, {k(0, "a"), k(1, "q")}, true);
  EXPECT_FALSE(bad.match);
}

// dlrr_digest_values goes to the process's session (interpose/GpuApi.cc): recorded, then checked.
TEST(DeviceDigests, RecordAndReplayTakeThemAsProcessSessions) {
  std::string root = testing::makeTempDir("ddps");
  std::string dir = root + "/t";
  int64_t shape[2] = {2, 3};
  DigestResult dev;
  dev.hash = 0x1234;
  {
    Config c;
    c.mode = Mode::Record;
    c.traceDir = dir;
    RecordSession rec(c);
    ProcessSession& s = rec;
    s.stepBegin(0, 0, 0, 0, StepRule::Batch);
    EXPECT_EQ(s.digestValues(0, "fc", 0, 0, "float32", 2, shape, 1, dev), 0);
    s.stepEnd(0, 1.0);
    rec.onExit(true, 0);
  }
  for (uint64_t hash : {0x1234, 0x9999}) {
    Config c;
    c.mode = Mode::Replay;
    c.traceDir = dir;
    ReplaySession rep(c, "end");
    ProcessSession& s = rep;
    s.stepBegin(0, 0, 0, 0, StepRule::Batch);
    DigestResult got = dev;
    got.hash = hash;
    EXPECT_EQ(s.digestValues(0, "fc", 0, 0, "float32", 2, shape, 1, got), hash == 0x1234 ? 0 : 1);
    EXPECT_EQ(s.digestValues(0, "head", 0, 0, "float32", 2, shape, 1, got), 2);  // not recorded
  }
  testing::removeTree(root);
}

TEST(DeviceDigests, RecordedWithTheirAlgorithmAndComparedLikeWithLike) {
  std::string root = testing::makeTempDir("dd");
  std::string dir = root + "/t";
  int64_t shape[2] = {2, 3};
  DigestResult dev;
  dev.hash = 0x1234;
  dev.min = -1;
  dev.max = 2;
  float host[6] = {1, 2, 3, 4, 5, 6};
  {
    Config c;
    c.mode = Mode::Record;
    c.traceDir = dir;
    RecordSession s(c);
    s.stepBegin(0, 0, 0, 0);
    EXPECT_EQ(s.digestValues(0, "fc", 0, 0, "float32", 2, shape, 1, dev), 0);
    DigestResult r;
    s.digest(0, "head", 0, 0, "float32", 2, shape, host, sizeof host, false, r);
    s.stepEnd(0, 1.0);
    s.stepBegin(1, 0, 1, 0);
    DigestResult nan = dev;
    nan.nanCount = 3;
    s.digestValues(0, "fc", 0, 0, "float32", 2, shape, 1, nan);  // the first non-finite: the failure
    s.stepEnd(1, std::nan(""));
    s.onExit(true, 0);
  }
  auto t = Trace::open(dir);
  TraceSummary sum = t->summarize();
  ASSERT_TRUE(sum.failure);
  EXPECT_EQ(sum.failure->kind, "nonfinite");
  EXPECT_EQ(sum.failure->step, 1);
  EXPECT_EQ(sum.failure->where, "fc");
  int algorithms[2] = {0, 0};
  t->mainStream()->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
    if (e.isDigest()) ++algorithms[static_cast<int>(e.getDigest().getAlgorithm())];
  });
  EXPECT_EQ(algorithms[0], 1);  // head: host XXH3
  EXPECT_EQ(algorithms[1], 2);  // fc: on the device

  Config c;
  c.mode = Mode::Replay;
  c.traceDir = dir;
  ReplaySession rep(c, "end");
  rep.stepBegin(0, 0, 0, 0);
  EXPECT_EQ(rep.digestValues(0, "fc", 0, 0, "float32", 2, shape, 1, dev), 0);
  DigestResult other = dev;
  other.hash = 0x9999;
  // Like with unlike is not a divergence: a device digest recorded, a host one recomputed.
  DigestResult hostDigest = computeDigest("float32", host, sizeof host);
  EXPECT_EQ(rep.digestValues(0, "fc", 0, 0, "float32", 2, shape, 0, hostDigest), 2);
  EXPECT_EQ(rep.digestValues(0, "head", 0, 0, "float32", 2, shape, 1, dev), 2);
  EXPECT_EQ(rep.digestValues(0, "head", 0, 0, "float32", 2, shape, 0, hostDigest), 0);
  EXPECT_FALSE(rep.divergence());
  rep.stepEnd(0, 1.0);
  EXPECT_FALSE(rep.divergence());  // the step matched everywhere
  rep.stepBegin(1, 0, 1, 0);
  EXPECT_EQ(rep.digestValues(0, "fc", 0, 0, "float32", 2, shape, 1, other), 1);
  ASSERT_TRUE(rep.divergence());
  EXPECT_NE(rep.divergence()->detail.find("recorded hash 0x0000000000001234"), std::string::npos);
  testing::removeTree(root);
}

}  // namespace
}  // namespace dlrr
