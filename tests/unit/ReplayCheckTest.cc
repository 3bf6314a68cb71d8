// dlreplay --check's verdict: reproduced or not, and never two verdicts (issue 18.1).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include "tools/dlreplay/Check.h"
#include "tools/dlreplay/ReplayOutcome.h"

namespace dlrr::replaycheck {
namespace {

TEST(ReplayCheck, AReachedNonFiniteValueIsReproduced) {
  CheckInput in;
  in.replayExit = kExitOk;
  in.waitStatus = W_EXITCODE(0, 0);
  in.report.attached = true;
  in.report.stopStep = "7";
  in.report.verifiedSteps = 7;
  in.recordedFailure = "non-finite value at step 7";
  triage::TriageInput facts;
  auto v = decideCheck(in, facts);
  EXPECT_TRUE(v.reproduced);
  EXPECT_EQ(v.exitCode, kExitOk);
  EXPECT_EQ(v.text, "deterministic: reproduced at step 7 (non-finite value at step 7)");
}

TEST(ReplayCheck, RacingTrainersOrUnrecordedProcessesKeepDeterminismUnclaimed) {
  CheckInput in;
  in.replayExit = kExitOk;
  in.report.attached = true;
  in.report.stopStep = "3";
  in.recordedFailure = "non-finite value at step 3";
  in.concurrencyCaveat = "determinism cannot be claimed: 2 trainers updated a shared model";
  triage::TriageInput facts;
  auto v = decideCheck(in, facts);
  EXPECT_TRUE(v.reproduced);
  EXPECT_EQ(v.text.rfind("deterministic", 0), std::string::npos);
  EXPECT_EQ(v.text, "reproduced at step 3 (non-finite value at step 3); " + in.concurrencyCaveat);
}

TEST(ReplayCheck, ADivergenceIsNotReproducedAndSaysWhy) {
  CheckInput in;
  in.replayExit = kExitDivergence;
  in.replayMessage = "diverged at step 0: module output fc1";
  in.recordedFailure = "non-finite value at step 7";
  triage::TriageInput facts;
  auto v = decideCheck(in, facts);
  EXPECT_FALSE(v.reproduced);
  EXPECT_EQ(v.exitCode, kExitNotReproduced);
  EXPECT_EQ(v.text, "not reproduced: diverged at step 0: module output fc1");
  in.jumpStep = 5;  // from a snapshot: a transient fault unless the snapshot missed state
  v = decideCheck(in, facts);
  EXPECT_NE(v.text.find("from the snapshot of step 5"), std::string::npos);
  in.nonDeterministic = true;  // computed twice from the snapshot, the step differed: the message says so
  EXPECT_EQ(decideCheck(in, facts).text.find("transient fault"), std::string::npos);
  in.nonDeterministic = false;
  in.replayExit = kExitNoReplay;  // never attached: that, not "not reproduced", is the exit code
  EXPECT_EQ(decideCheck(in, facts).exitCode, kExitNoReplay);
}

TEST(ReplayCheck, AnExitStatusFailureMustEndWithTheSameStatus) {
  triage::TriageInput facts;
  facts.exitCode = 3;
  CheckInput in;
  in.checkExit = true;
  in.replayExit = kExitOk;
  in.report.attached = true;
  in.report.verifiedSteps = 4;
  in.waitStatus = W_EXITCODE(3, 0);
  auto v = decideCheck(in, facts);
  EXPECT_TRUE(v.reproduced);
  EXPECT_NE(v.text.find("exit status 3"), std::string::npos);
  in.waitStatus = W_EXITCODE(0, 0);
  v = decideCheck(in, facts);
  EXPECT_FALSE(v.reproduced);
  EXPECT_EQ(v.exitCode, kExitNotReproduced);
  EXPECT_EQ(v.text, "not reproduced: the replayed job ended with status 0, the recording with 3");
  in.waitStatus = W_EXITCODE(3, 0);
  in.jumpStep = 10;  // from a snapshot: the 4 verified steps are 10 to 13
  EXPECT_EQ(decideCheck(in, facts).text, "deterministic: reproduced at step 13 (exit status 3)");
}

}  // namespace
}  // namespace dlrr::replaycheck
