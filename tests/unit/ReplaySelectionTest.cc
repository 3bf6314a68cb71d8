// dlreplay's first phase: what a trace and the options select, and what is refused before
// anything runs (issue 14: the command split into plan, run and outcome).
#include <gtest/gtest.h>

#include "format/Trace.h"
#include "support/SampleTrace.h"
#include "tools/dlreplay/ReplayOutcome.h"
#include "tools/dlreplay/ReplaySelection.h"

namespace dlrr {
namespace {

class ReplaySelectionTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::makeTempDir("selection"); }
  void TearDown() override { testing::removeTree(dir_); }

  SelectionResult select(const ReplayOptions& o, int nanAtStep = -1, bool cuda = false, int raiseAtStep = -1) {
    testing::SampleOptions so;
    so.nanAtStep = nanAtStep;
    so.raiseAtStep = raiseAtStep;
    std::string path = dir_ + "/t" + std::to_string(n_++) + ".dlrr";
    testing::writeSampleTrace(path, so);
    trace_ = Trace::open(path, OpenMode::Tolerant);
    return selectReplay(*trace_, o, cuda);
  }
  static std::string joined(const ReplayRefusal& r) {
    std::string s;
    for (const auto& l : r.lines) s += l + "\n";
    return s;
  }

  std::string dir_;
  int n_ = 0;
  std::unique_ptr<Trace> trace_;
};

TEST_F(ReplaySelectionTest, DefaultTargetIsTheRecordedFailure) {
  auto r = select({}, /*nanAtStep=*/3);
  ASSERT_TRUE(r.selection) << joined(r.refusal);
  EXPECT_EQ(r.selection->until, "nan");
  EXPECT_EQ(r.selection->target.kind, ReplayTarget::Kind::Nan);
  EXPECT_EQ(r.selection->stream->name(), "p101");
  EXPECT_EQ(r.selection->command, (std::vector<std::string>{"python3", "train.py"}));
  EXPECT_FALSE(r.selection->explicitCommand);
  EXPECT_EQ(r.selection->jump.jumpStep, -1);  // no snapshot: every step verified
  EXPECT_TRUE(r.notes.empty());
}

TEST_F(ReplaySelectionTest, AHealthyTraceReplaysToItsEnd) {
  auto r = select({});
  ASSERT_TRUE(r.selection) << joined(r.refusal);
  EXPECT_EQ(r.selection->until, "end");
  EXPECT_EQ(r.selection->summary.steps, 5u);
}

TEST_F(ReplaySelectionTest, TargetsTheTraceCannotHoldAreRefused) {
  ReplayOptions o;
  o.until = "step=7";
  auto r = select(o);
  ASSERT_FALSE(r.selection);
  EXPECT_EQ(r.refusal.exitCode, kExitNotFound);
  EXPECT_EQ(joined(r.refusal), "step 7 is beyond the trace, which holds steps 0 to 4\n");

  o.until = "nan";
  r = select(o);
  ASSERT_FALSE(r.selection);
  EXPECT_NE(joined(r.refusal).find("records no non-finite value"), std::string::npos);

  o.until = "crash";
  r = select(o, 2);
  ASSERT_FALSE(r.selection);
  EXPECT_NE(joined(r.refusal).find("records no exception or fatal signal"), std::string::npos);
}

// A NaN, then the exception it caused (clip_grad_norm_(error_if_nonfinite=True)): nan is the
// default target, and crash is the exception, at its own step.
TEST_F(ReplaySelectionTest, AnExceptionAfterANanIsTheCrashTarget) {
  auto r = select({}, /*nanAtStep=*/2, false, /*raiseAtStep=*/4);
  ASSERT_TRUE(r.selection) << joined(r.refusal);
  EXPECT_EQ(r.selection->target.kind, ReplayTarget::Kind::Nan);
  ASSERT_TRUE(r.selection->summary.failure && r.selection->summary.crash);
  EXPECT_EQ(r.selection->summary.failure->kind, "nonfinite");
  EXPECT_EQ(r.selection->summary.crash->kind, "exception");
  EXPECT_EQ(r.selection->summary.crash->exceptionType, "RuntimeError");
  EXPECT_EQ(r.selection->summary.crash->step, 4);

  ReplayOptions o;
  o.until = "crash";
  r = select(o, 2, false, 4);
  ASSERT_TRUE(r.selection) << joined(r.refusal);
  EXPECT_EQ(r.selection->target.kind, ReplayTarget::Kind::Crash);
}

TEST_F(ReplaySelectionTest, RanksOfANonDistributedTraceAreRefused) {
  ReplayOptions o;
  o.rank = 1;
  auto r = select(o);
  ASSERT_FALSE(r.selection);
  EXPECT_EQ(r.refusal.exitCode, kExitNotFound);
  EXPECT_NE(joined(r.refusal).find("no rank of a distributed job"), std::string::npos);
}

TEST_F(ReplaySelectionTest, UnknownStreamsAndMissingSnapshotsAreRefused) {
  ReplayOptions o;
  o.stream = "p999";
  auto r = select(o);
  ASSERT_FALSE(r.selection);
  EXPECT_EQ(joined(r.refusal), "no stream named 'p999' in the trace (see dltrace info)\n");

  ReplayOptions f;
  f.from = "step=2";
  r = select(f, 3);
  ASSERT_FALSE(r.selection);
  EXPECT_EQ(r.refusal.exitCode, kExitNotFound);
  EXPECT_EQ(joined(r.refusal), "the trace holds no snapshot of step 2\n");
}

TEST_F(ReplaySelectionTest, CheckNeedsARecordedFailure) {
  ReplayOptions o;
  o.check = true;
  auto r = select(o);  // the sample job exited 0
  ASSERT_FALSE(r.selection);
  EXPECT_EQ(r.refusal.exitCode, kExitNotFound);
  EXPECT_EQ(joined(r.refusal), "--check: the recording holds no failure (the job exited 0): nothing to reproduce\n");

  r = select(o, 1);
  ASSERT_TRUE(r.selection) << joined(r.refusal);
  EXPECT_EQ(r.selection->target.kind, ReplayTarget::Kind::Nan);
  EXPECT_FALSE(r.selection->checkExit);
}

TEST_F(ReplaySelectionTest, AGivenCommandIsKept) {
  ReplayOptions o;
  o.command = {"python3", "-X", "dev", "train.py"};
  auto r = select(o);
  ASSERT_TRUE(r.selection) << joined(r.refusal);
  EXPECT_TRUE(r.selection->explicitCommand);
  EXPECT_EQ(r.selection->command, o.command);
}

}  // namespace
}  // namespace dlrr
