// format/Wavefront: where the ranks of a distributed job part, and the suspect rank(s).
#include <gtest/gtest.h>

#include "format/Wavefront.h"

namespace dlrr {
namespace {

// A rank that issued and completed `n` all_reduces, one per step.
RankPosition ranAllReduces(int rank, int n) {
  RankPosition p;
  p.rank = rank;
  for (int i = 0; i < n; ++i) {
    p.ops[static_cast<uint64_t>(i)] = "all_reduce";
    p.stepOf[static_cast<uint64_t>(i)] = i;
  }
  p.lastCompleted = n - 1;
  p.steps = n;
  return p;
}

void waitsIn(RankPosition& p, uint64_t seq, const std::string& op) {
  p.ops[seq] = op;
  p.stepOf[seq] = static_cast<int64_t>(seq);
  p.inFlight = seq;
}

const char* kStacks =
    "Thread MainThread:\n"
    "  File \"/job/train.py\", line 40, in main\n"
    "    x = load_batch(step)\n"
    "  File \"/job/train.py\", line 12, in load_batch\n"
    "    time.sleep(60)\n"
    "  File \"/usr/lib/python3.11/threading.py\", line 320, in wait\n"
    "    waiter.acquire()\n"
    "Thread loader:\n"
    "  File \"/job/other.py\", line 1, in f\n";

TEST(Wavefront, RanksThatMetEverywhereAreNoFinding) {
  EXPECT_FALSE(findHang({ranAllReduces(0, 3), ranAllReduces(1, 3)}));
  EXPECT_FALSE(findHang({ranAllReduces(0, 3)}));  // one rank: nothing to part from
}

TEST(Wavefront, StuckRankNamedWithItsStack) {
  RankPosition r0 = ranAllReduces(0, 1), r1 = ranAllReduces(1, 1);
  waitsIn(r0, 1, "all_reduce");
  r0.exitCode = 1;
  r1.waitReason = "stalled";
  r1.waitedSeconds = 4;
  r1.terminated = true;
  r1.stackLine = innermostUserFrame(kStacks);
  auto h = findHang({r0, r1});
  ASSERT_TRUE(h);
  EXPECT_FALSE(h->desync);
  EXPECT_EQ(h->seq, 1u);
  EXPECT_EQ(h->op, "all_reduce");
  EXPECT_EQ(h->waiting, std::vector<int>{0});
  EXPECT_EQ(h->suspects, std::vector<int>{1});
  EXPECT_EQ(h->location, "train.py:12 in load_batch: time.sleep(60)");
  EXPECT_EQ(h->why[0],
            "rank 1 never reached collective #1 (all_reduce, step 1): stuck after completing collective #0 at "
            "train.py:12 in load_batch: time.sleep(60) (no collective for 4 s, then stopped by SIGTERM)");
}

TEST(Wavefront, DesyncTieGoesToTheOpTheRanksHadBeenIssuing) {
  RankPosition r0 = ranAllReduces(0, 2), r1 = ranAllReduces(1, 2);
  waitsIn(r0, 2, "all_reduce");
  waitsIn(r1, 2, "broadcast");
  auto h = findHang({r0, r1});
  ASSERT_TRUE(h);
  EXPECT_TRUE(h->desync);
  EXPECT_EQ(h->suspects, std::vector<int>{1});
  EXPECT_EQ(h->why[0], "rank 1 called broadcast where rank 0 called all_reduce at collective #2 (step 2)");
  // Three ranks: the majority decides whatever came before.
  RankPosition a = ranAllReduces(0, 0), b = ranAllReduces(1, 0), c = ranAllReduces(2, 0);
  waitsIn(a, 0, "barrier");
  waitsIn(b, 0, "all_gather");
  waitsIn(c, 0, "barrier");
  h = findHang({a, b, c});
  ASSERT_TRUE(h);
  EXPECT_EQ(h->suspects, std::vector<int>{1});
  EXPECT_EQ(h->waiting, (std::vector<int>{0, 2}));
}

TEST(Wavefront, RankThatEndedEarlyOrDied) {
  RankPosition r0 = ranAllReduces(0, 2), r1 = ranAllReduces(1, 1), r2 = ranAllReduces(2, 1);
  waitsIn(r0, 2, "all_reduce");
  r1.exitCode = 0;
  auto h = findHang({r0, r1, r2});
  ASSERT_TRUE(h);
  EXPECT_EQ(h->suspects, (std::vector<int>{1, 2}));
  EXPECT_EQ(h->seq, 2u);
  EXPECT_EQ(h->why[0],
            "rank 1 ended (exit 0) after completing collective #0 at step 1, 1 step(s) fewer than the others: it "
            "never issued collective #2 (all_reduce, step 2)");
  EXPECT_NE(h->why[1].find("rank 2 died after completing collective #0: its stream ends without an exit"),
            std::string::npos);
}

TEST(Wavefront, RankThatDiedWhileTheOthersWereStoppedBeforeTheNextCollective) {
  RankPosition r0 = ranAllReduces(0, 1), r1 = ranAllReduces(1, 1);
  r0.terminated = true;
  r0.waitReason = "terminated";
  auto h = findHang({r0, r1});
  ASSERT_TRUE(h);
  EXPECT_EQ(h->suspects, std::vector<int>{1});
  EXPECT_EQ(h->waiting, std::vector<int>{0});
  EXPECT_NE(h->why[0].find("rank 1 died after completing collective #0: its stream ends without an exit"),
            std::string::npos);
  r0.terminated = false;
  r0.waitReason.clear();
  r0.exitCode = 0;  // it ended well: nothing says the dead rank stopped anyone
  EXPECT_FALSE(findHang({r0, r1}));
}

TEST(Wavefront, EveryRankInTheSameCollectiveHasNoSuspect) {
  RankPosition r0 = ranAllReduces(0, 1), r1 = ranAllReduces(1, 1);
  waitsIn(r0, 1, "all_reduce");
  waitsIn(r1, 1, "all_reduce");
  auto h = findHang({r0, r1});
  ASSERT_TRUE(h);
  EXPECT_TRUE(h->suspects.empty());
  EXPECT_NE(h->summary.find("every rank issued collective #1"), std::string::npos);
}

TEST(Wavefront, SubgroupsAreNotAnalysed) {
  // Ranks of different subgroups issue different numbers of collectives: no false desync.
  RankPosition r0 = ranAllReduces(0, 2), r1 = ranAllReduces(1, 1);
  r0.subgroups = true;
  EXPECT_FALSE(findHang({r0, r1}));
}

TEST(Wavefront, InnermostUserFrameSkipsLibrariesAndBadText) {
  EXPECT_EQ(innermostUserFrame(""), "");
  EXPECT_EQ(innermostUserFrame("Thread x:\n  File \"/usr/lib/python3/dist-packages/torch/a.py\", line 3, in f\n"), "");
  EXPECT_EQ(innermostUserFrame("  File \"broken"), "");
  EXPECT_EQ(innermostUserFrame("Thread T:\n  File \"/a/b.py\", line 7, in g\n"), "b.py:7 in g");
  EXPECT_EQ(innermostUserFrame("  File \"/a/b.py\", line 7, in g"), "b.py:7 in g");            // no final newline
  EXPECT_EQ(innermostUserFrame("  File \"/a/b.py\", in g, line 7\n"), "b.py:7 in g, line 7");  // misordered: no crash
}

}  // namespace
}  // namespace dlrr
