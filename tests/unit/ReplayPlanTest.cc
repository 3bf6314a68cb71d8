// Jump replay's plan: which snapshot dlreplay restores, and when it replays from step 0 (issue 15).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include "tools/dlrecord/RecordOptions.h"
#include "tools/dlreplay/ReplayOptions.h"
#include "tools/dlreplay/ReplayOutcome.h"
#include "tools/dlreplay/ReplayPlan.h"

namespace dlrr {
namespace {

// A function's static: an exception while it is made fails the test, not the binary's start.
const std::vector<SnapshotInfo>& snaps() {
  static const std::vector<SnapshotInfo> v{{100, false}, {200, false}, {300, false}, {340, true}};
  return v;
}

JumpPlan plan(ReplayTarget::Kind k, int64_t step, const std::string& from, const std::vector<SnapshotInfo>& s = snaps(),
              bool useFailure = false) {
  std::string err;
  auto p = planJump(s, k, step, from, useFailure, err);
  EXPECT_TRUE(p.has_value()) << err;
  return p.value_or(JumpPlan{});
}

std::string error(ReplayTarget::Kind k, int64_t step, const std::string& from) {
  std::string err;
  EXPECT_FALSE(planJump(snaps(), k, step, from, false, err).has_value());
  return err;
}

TEST(ReplayPlan, PicksTheLatestSnapshotAtOrBeforeTheTarget) {
  EXPECT_EQ(plan(ReplayTarget::Kind::Step, 250, "").jumpStep, 200);
  EXPECT_EQ(plan(ReplayTarget::Kind::Step, 200, "").jumpStep, 200);  // its own snapshot: stop right after the restore
  EXPECT_EQ(plan(ReplayTarget::Kind::Step, 99, "").jumpStep, -1);    // none before it: from the start
  // By default the failure snapshot is left alone (the steps before the failure stay verified);
  // --check and --from snapshot use it: a nan target at step 340 replays that step alone.
  EXPECT_EQ(plan(ReplayTarget::Kind::Nan, 340, "").jumpStep, 300);
  EXPECT_EQ(plan(ReplayTarget::Kind::Nan, 340, "snapshot").jumpStep, 340);
  EXPECT_EQ(plan(ReplayTarget::Kind::Step, 30, "", {{20, true}}).jumpStep, -1);
  JumpPlan p = plan(ReplayTarget::Kind::Nan, 340, "", snaps(), true);
  EXPECT_EQ(p.jumpStep, 340);
  EXPECT_NE(p.why.find("failure snapshot"), std::string::npos) << p.why;
  EXPECT_NE(p.why.find("steps 0-339 are fast-forwarded"), std::string::npos) << p.why;
}

TEST(ReplayPlan, APeriodicSnapshotWinsOverAFailureOneOfTheSameStep) {
  std::vector<SnapshotInfo> s = {{50, true}, {50, false}};
  JumpPlan p = plan(ReplayTarget::Kind::Nan, 50, "", s, true);
  EXPECT_EQ(p.jumpStep, 50);
  EXPECT_EQ(p.why.find("failure"), std::string::npos) << p.why;
}

TEST(ReplayPlan, UntilEndReplaysEverythingUnlessAskedToJump) {
  EXPECT_EQ(plan(ReplayTarget::Kind::End, -1, "").jumpStep, -1);
  EXPECT_EQ(plan(ReplayTarget::Kind::End, -1, "snapshot").jumpStep, 340);
  EXPECT_EQ(plan(ReplayTarget::Kind::End, -1, "step=100").jumpStep, 100);
  // --until end --from step=N says what is fast-forwarded too (issue 28 item 10).
  EXPECT_NE(plan(ReplayTarget::Kind::End, -1, "step=100").why.find("steps 0-99 are fast-forwarded (not verified)"),
            std::string::npos);
}

TEST(ReplayPlan, FromStartNeverJumps) {
  EXPECT_EQ(plan(ReplayTarget::Kind::Nan, 340, "start").jumpStep, -1);
  EXPECT_EQ(plan(ReplayTarget::Kind::Step, 250, "start").jumpStep, -1);
}

TEST(ReplayPlan, SnapshotZeroIsNoJump) { EXPECT_EQ(plan(ReplayTarget::Kind::Step, 5, "", {{0, false}}).jumpStep, -1); }

TEST(ReplayPlan, ErrorsSayWhatTheTraceHolds) {
  EXPECT_EQ(error(ReplayTarget::Kind::End, -1, "step=150"),
            "the trace holds no snapshot of step 150 (snapshots: 100 200 300 340)");
  EXPECT_EQ(error(ReplayTarget::Kind::Step, 250, "step=300"),
            "the snapshot of step 300 lies after the target (step 250)");
  EXPECT_EQ(error(ReplayTarget::Kind::Step, 50, "snapshot"), "the trace holds no snapshot at or before step 50");
  EXPECT_EQ(error(ReplayTarget::Kind::Step, 50, "step=x"), "--from takes snapshot, start or step=N, not 'step=x'");
  std::string err;
  EXPECT_FALSE(planJump({}, ReplayTarget::Kind::End, -1, "snapshot", false, err));
  EXPECT_EQ(err, "the trace holds no snapshot (record with dlrecord --snapshot-every)");
}

TEST(ReplayPlan, OptionParsing) {
  EXPECT_EQ(parseReplayOptions({"--from", "step=12", "t"}).from, "step=12");
  EXPECT_EQ(parseReplayOptions({"--from=start", "t"}).from, "start");
  EXPECT_THROW(parseReplayOptions({"--from", "later", "t"}), tools::UsageError);
  EXPECT_THROW(parseReplayOptions({"--from", "step=-1", "t"}), tools::UsageError);
}

// The outcome of a jump replay: a divergence at the jump step blames what the snapshot lacks.
TEST(ReplayPlan, ADivergenceAtTheJumpStepIsNeverReportedAsVerified) {
  ReplayFacts f;
  f.report.attached = true;
  f.report.stop = ReplayReport::Stop::Divergence;
  f.report.verifiedSteps = 0;
  f.report.divergence = ReplayReport::Divergence{300, "loss", "", "loss: recorded 1, replayed 2"};
  f.waitStatus = W_EXITCODE(0, 0);
  f.target = ReplayTarget::Kind::Nan;
  f.targetText = "nan";
  f.recordedSteps = 341;
  f.jumpStep = 300;
  ReplayOutcome o = decideReplayOutcome(f);
  EXPECT_EQ(o.exitCode, kExitDivergence);
  EXPECT_EQ(o.message.rfind("jump replay diverged after the jump at step 300: loss: recorded 1, replayed 2", 0), 0u)
      << o.message;
  EXPECT_NE(o.message.find("run with --from start for a full replay"), std::string::npos) << o.message;
  // Later, it still names the jump (state the snapshot lacks may act steps after it), and the
  // last verified step counts from the jump.
  f.report.divergence->step = 305;
  f.report.verifiedSteps = 5;
  o = decideReplayOutcome(f);
  EXPECT_EQ(o.exitCode, kExitDivergence);
  EXPECT_EQ(o.message.rfind("jump replay diverged at step 305, after the jump to step 300 (last verified step 304)", 0),
            0u)
      << o.message;
}

TEST(ReplayPlan, AJumpReplayToTheEndCountsTheStepsAfterTheJump) {
  ReplayFacts f;
  f.report.attached = true;
  f.report.stop = ReplayReport::Stop::Exit;
  f.report.verifiedSteps = 41;
  f.waitStatus = W_EXITCODE(0, 0);
  f.target = ReplayTarget::Kind::End;
  f.targetText = "the end";
  f.recordedSteps = 341;
  f.recordedExit = 0;
  f.jumpStep = 300;
  EXPECT_EQ(decideReplayOutcome(f).exitCode, kExitOk);
  f.report.verifiedSteps = 40;  // one step short of the end
  ReplayOutcome o = decideReplayOutcome(f);
  EXPECT_EQ(o.exitCode, kExitDivergence);
  EXPECT_NE(o.message.find("last verified step 339"), std::string::npos) << o.message;
}

TEST(RecordOptionsSnapshots, SnapshotEvery) {
  EXPECT_TRUE(validSnapshotEvery("auto"));
  EXPECT_TRUE(validSnapshotEvery("off"));
  EXPECT_TRUE(validSnapshotEvery("120"));
  EXPECT_TRUE(validSnapshotEvery("0.5"));
  EXPECT_TRUE(validSnapshotEvery("1000steps"));
  EXPECT_FALSE(validSnapshotEvery("0steps"));
  EXPECT_FALSE(validSnapshotEvery("steps"));
  EXPECT_FALSE(validSnapshotEvery("1.5steps"));
  EXPECT_FALSE(validSnapshotEvery("0"));
  EXPECT_FALSE(validSnapshotEvery("-3"));
  EXPECT_FALSE(validSnapshotEvery("10m"));
}

}  // namespace
}  // namespace dlrr
