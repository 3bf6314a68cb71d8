// The replay verdict never flatters (issue 12 item 3, issue 18 items 1 and 14).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include "tools/dlreplay/Recomputation.h"
#include "tools/dlreplay/ReplayOutcome.h"
#include "tools/dlreplay/TraceEnd.h"

namespace dlrr {
namespace {

ReplayFacts atEnd(uint64_t verified, uint64_t recorded) {
  ReplayFacts f;
  f.report.attached = true;
  f.report.stop = ReplayReport::Stop::Exit;
  f.report.verifiedSteps = static_cast<int64_t>(verified);
  f.waitStatus = W_EXITCODE(0, 0);
  f.target = ReplayTarget::Kind::End;
  f.targetText = "the end";
  f.recordedSteps = recorded;
  f.recordedExit = 0;
  return f;
}

TEST(ReplayOutcome, EveryStepVerifiedToTheEndIsSuccess) {
  ReplayOutcome o = decideReplayOutcome(atEnd(121, 121));
  EXPECT_EQ(o.exitCode, kExitOk);
  EXPECT_EQ(o.message, "replayed to the end");
}

TEST(ReplayOutcome, AnExceptionTheRecordingDidNotRaiseIsADivergenceNamingIt) {
  ReplayFacts f = atEnd(0, 121);
  f.report.exception = "FileNotFoundError: [Errno 2] No such file or directory: 'data/train.csv'";
  f.report.exceptionWhere = "train.py:12 in <module>";
  f.waitStatus = W_EXITCODE(1, 0);
  ReplayOutcome o = decideReplayOutcome(f);
  EXPECT_EQ(o.exitCode, kExitDivergence);
  EXPECT_NE(o.message.find("raised FileNotFoundError: [Errno 2] No such file or directory: 'data/train.csv' at "
                           "train.py:12 in <module>"),
            std::string::npos)
      << o.message;
  EXPECT_NE(o.message.find("the recording exited with status 0"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("no step verified"), std::string::npos) << o.message;
}

TEST(ReplayOutcome, FewerStepsVerifiedThanRecordedAtTheEndIsNeverSuccess) {
  ReplayOutcome o = decideReplayOutcome(atEnd(3, 121));
  EXPECT_EQ(o.exitCode, kExitDivergence);
  EXPECT_NE(o.message.find("ended after 3 of 121 recorded steps; last verified step 2"), std::string::npos)
      << o.message;
}

TEST(ReplayOutcome, ADifferentExitStatusIsADivergence) {
  ReplayFacts f = atEnd(5, 5);
  f.waitStatus = W_EXITCODE(3, 0);
  ReplayOutcome o = decideReplayOutcome(f);
  EXPECT_EQ(o.exitCode, kExitDivergence);
  EXPECT_NE(o.message.find("exited with status 3; the recording exited with status 0; last verified step 4"),
            std::string::npos)
      << o.message;
}

TEST(ReplayOutcome, ASignalTheRecordingDidNotDieOfIsADivergenceNamingIt) {
  ReplayFacts f = atEnd(2, 5);
  f.report.stop = ReplayReport::Stop::Running;  // the last report written at a step
  f.waitStatus = W_EXITCODE(0, SIGSEGV);
  f.target = ReplayTarget::Kind::Nan;
  f.targetText = "the first NaN/Inf (step 4)";
  f.recordedFailureKind = "nonfinite";
  ReplayOutcome o = decideReplayOutcome(f);
  EXPECT_EQ(o.exitCode, kExitDivergence);
  EXPECT_NE(o.message.find("(signal 11)"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("last verified step 1"), std::string::npos) << o.message;
}

TEST(ReplayOutcome, TheRecordedCrashReproducedIsSuccess) {
  ReplayFacts f = atEnd(4, 4);
  f.report.stop = ReplayReport::Stop::Running;  // the last report written at a step
  f.target = ReplayTarget::Kind::Crash;
  f.recordedFailureKind = "signal";
  f.recordedSignal = SIGSEGV;
  f.recordedExit = 128 + SIGSEGV;
  f.waitStatus = W_EXITCODE(0, SIGSEGV);
  EXPECT_EQ(decideReplayOutcome(f).exitCode, kExitOk);
  f.waitStatus = W_EXITCODE(0, SIGABRT);  // another signal: not the recorded crash
  EXPECT_EQ(decideReplayOutcome(f).exitCode, kExitDivergence);
}

TEST(ReplayOutcome, TheRecordedExceptionIsReproducedOnlyByAnExceptionOfItsType) {
  ReplayFacts f = atEnd(4, 4);
  f.report.stop = ReplayReport::Stop::Running;
  f.target = ReplayTarget::Kind::Crash;
  f.targetText = "the recorded crash";
  f.recordedFailureKind = "exception";
  f.recordedExceptionType = "FileNotFoundError";
  f.recordedExit = 1;
  f.waitStatus = W_EXITCODE(1, 0);
  f.report.exception = "FileNotFoundError: [Errno 2] No such file or directory: 'results/x.png'";
  EXPECT_EQ(decideReplayOutcome(f).exitCode, kExitOk);
  f.report.exception = "KeyError: 'k'";  // another failure: never "reproduced"
  ReplayOutcome o = decideReplayOutcome(f);
  EXPECT_EQ(o.exitCode, kExitDivergence);
  EXPECT_NE(o.message.find("the recording raised FileNotFoundError"), std::string::npos) << o.message;
  // The job got past where the recording failed and asked for a batch the trace lacks.
  f.report.exception.reset();
  f.report.stop = ReplayReport::Stop::EndOfRecording;
  f.waitStatus = W_EXITCODE(0, 0);
  EXPECT_EQ(decideReplayOutcome(f).exitCode, kExitNotReached);
}

TEST(ReplayOutcome, ABatchTheTraceCannotServeIsNoDivergence) {
  // The recorded job failed later (exit 1); the replay stopped at a batch it could not serve
  // and its process exited 0: that is no different end, and nothing was computed differently.
  ReplayFacts f = atEnd(3, 10);
  f.recordedExit = 1;
  f.report.stop = ReplayReport::Stop::Unservable;
  f.report.stopWhere = "batch 3 of loader 0 (step 3) holds a value dlrr did not record (train.Batch)";
  ReplayOutcome o = decideReplayOutcome(f);
  EXPECT_EQ(o.exitCode, kExitNotReached);
  EXPECT_EQ(o.message,
            "cannot replay past here: batch 3 of loader 0 (step 3) holds a value dlrr did not record (train.Batch); "
            "last verified step 2");
  f.recordedExit = 0;
  EXPECT_EQ(decideReplayOutcome(f).message, o.message);
}

TEST(ReplayOutcome, AnExceptionAfterBatchesServedInAnotherTypeIsNoDivergence) {
  ReplayFacts f = atEnd(0, 8);
  f.report.divergence = ReplayReport::Divergence{};
  f.report.divergence->step = 0;
  f.report.exception = "AttributeError: 'tuple' object has no attribute 'x'";
  f.report.exceptionWhere = "train.py:53 in <module>";
  f.waitStatus = W_EXITCODE(1, 0);
  f.plainBatches = std::string("p1: batch 0 of loader 0 holds train.Sample (a namedtuple) as a plain tuple; ") +
                   kPlainBatchNote + ": replay serves that plain type";
  ReplayOutcome o = decideReplayOutcome(f);
  EXPECT_EQ(o.exitCode, kExitNotReached);
  EXPECT_EQ(o.message.find("diverged"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("cannot replay this job from the trace: the replayed job raised AttributeError"),
            std::string::npos)
      << o.message;
  EXPECT_NE(o.message.find("train.Sample (a namedtuple) as a plain tuple"), std::string::npos) << o.message;
  // Without such batches, the same exception is a divergence.
  f.plainBatches.clear();
  EXPECT_EQ(decideReplayOutcome(f).exitCode, kExitDivergence);
  // The recorded exception again is the recorded end, whatever the batches.
  f.plainBatches = "x";
  f.recordedFailureKind = "exception";
  f.recordedExceptionType = "AttributeError";
  f.report.divergence.reset();
  f.target = ReplayTarget::Kind::Crash;
  EXPECT_EQ(decideReplayOutcome(f).exitCode, kExitOk);
}

TEST(ReplayOutcome, TheEndOfACutTraceHasItsOwnCodeAndSaysWhy) {
  ReplayFacts f = atEnd(109, 109);
  f.report.stop = ReplayReport::Stop::EndOfRecording;
  f.report.stopWhere = "step 109 is not in the recording: the trace ends in step 108";
  StreamSummary s;
  s.pid = 42;
  f.traceCut = traceCutReason(s, 128 + SIGKILL, {});
  ReplayOutcome o = decideReplayOutcome(f);
  EXPECT_EQ(o.exitCode, kExitTraceCut);
  EXPECT_EQ(o.message,
            "the trace was cut short (the recorded job was killed by signal 9 (Killed)); step 109 is not in the "
            "recording: the trace ends in step 108; last verified step 108");
  EXPECT_NE(traceCutReason(s, 128 + SIGTERM, {}).find("signal 15 (Terminated, e.g. a timeout)"), std::string::npos);
  EXPECT_EQ(traceCutReason(s, 0, {"launcher: pid 42: recording stopped: No space left on device"}),
            "recording stopped: No space left on device");
  EXPECT_NE(traceCutReason(s, 0, {}).find("exited with status 0 but its stream was not closed"), std::string::npos);
  s.cleanClose = true;  // a trace that ended with its job: running past it is no cut
  EXPECT_EQ(traceCutReason(s, 0, {}), "");
  f.traceCut.clear();
  EXPECT_EQ(decideReplayOutcome(f).exitCode, kExitNotReached);
}

TEST(ReplayOutcome, AJumpWhoseSnapshotWasNotLoadedWholeNamesThatCause) {
  ReplayFacts f = atEnd(0, 30);
  f.jumpStep = 20;
  f.report.divergence = ReplayReport::Divergence{20, "loss", "", "loss: recorded 0.5, replayed 0.7"};
  ReplayOutcome o = decideReplayOutcome(f);
  EXPECT_NE(o.message.find("state outside modules/optimizers/schedulers"), std::string::npos) << o.message;
  f.report.warnings = {"jump: not restored: 0 modules here, 1 in the snapshot"};
  o = decideReplayOutcome(f);
  EXPECT_EQ(o.exitCode, kExitDivergence);
  EXPECT_NE(o.message.find("the snapshot was not loaded whole (jump: not restored: 0 modules here, 1 in the snapshot)"),
            std::string::npos)
      << o.message;
  EXPECT_EQ(o.message.find("state outside"), std::string::npos) << o.message;
}

TEST(ReplayOutcome, AReplayThatEndsAsTheRecordingDidBeforeTheTargetIsNotReached) {
  ReplayFacts f = atEnd(2, 5);
  f.report.stop = ReplayReport::Stop::Running;  // the last report written at a step
  f.target = ReplayTarget::Kind::Step;
  f.targetText = "step 4";
  ReplayOutcome o = decideReplayOutcome(f);
  EXPECT_EQ(o.exitCode, kExitNotReached);
  EXPECT_NE(o.message.find("ended before reaching step 4: the replayed job exited with status 0; last verified step 1"),
            std::string::npos)
      << o.message;
}

TEST(ReplayOutcome, AnExceptionInAStepNamesTheExceptionNotTheMissingLoss) {
  ReplayFacts f = atEnd(3, 8);
  f.report.divergence = ReplayReport::Divergence{3, "loss", "", "loss: recorded 1.19615221, replayed nan"};
  f.report.exception = "KeyError: 'missing-key-3'";
  f.waitStatus = W_EXITCODE(1, 0);
  ReplayOutcome o = decideReplayOutcome(f);
  EXPECT_EQ(o.exitCode, kExitDivergence);
  EXPECT_EQ(o.message,
            "diverged at step 3: the replayed job raised KeyError: 'missing-key-3' where the recording did not; last "
            "verified step 2");
}

TEST(ReplayOutcome, NeverAttachedAndStepDivergenceKeepTheirCodes) {
  ReplayFacts f = atEnd(0, 5);
  f.report = ReplayReport{};
  EXPECT_EQ(decideReplayOutcome(f).exitCode, kExitNoReplay);
  f = atEnd(1, 5);
  f.report.divergence = ReplayReport::Divergence{1, "loss", "", "loss"};
  EXPECT_EQ(decideReplayOutcome(f).message, "diverged at step 1: loss");
}

// A diverged jump replay computed twice from the same snapshot (Recomputation.h).
ReplayReport::Divergence divergence(int64_t step, const std::string& path, const std::string& replayed) {
  return {step, "module output", path,
          "module output " + path + " (call 0, output 0): recorded hash 0x1; replayed hash " + replayed};
}

ReplayReport diverged(const ReplayReport::Divergence& d) {
  ReplayReport r;
  r.attached = true;
  r.divergence = d;
  return r;
}

TEST(Recomputation, TheSameValuesAgainAreADeterministicStep) {
  Recomputation r = compareComputations(divergence(6, "fc", "0x2"), diverged(divergence(6, "fc", "0x2")), false);
  EXPECT_TRUE(r.agreed);
  EXPECT_EQ(r.differsAt, "");
}

TEST(Recomputation, NamesTheTensorWhereTheTwoComputationsFirstDiffer) {
  EXPECT_EQ(compareComputations(divergence(6, "fc", "0x2"), diverged(divergence(6, "fc", "0x3")), false).differsAt,
            "module output fc (call 0, output 0) of step 6");
  // One computation matched the recording where the other diverged earlier: they differ there.
  EXPECT_EQ(compareComputations(divergence(7, "fc", "0x2"), diverged(divergence(6, "act", "0x3")), false).differsAt,
            "module output act (call 0, output 0) of step 6");
  EXPECT_EQ(compareComputations(divergence(6, "fc", "0x2"), diverged(divergence(8, "act", "0x3")), false).differsAt,
            "module output fc (call 0, output 0) of step 6");
  // Two places of one step: the reports do not say which came first.
  EXPECT_EQ(compareComputations(divergence(6, "fc", "0x2"), diverged(divergence(6, "act", "0x3")), false).differsAt,
            "module output fc (call 0, output 0) of step 6 in one computation, module output act (call 0, output 0) "
            "of step 6 in the other");
  ReplayReport verified;
  verified.attached = true;
  EXPECT_EQ(compareComputations(divergence(6, "fc", "0x2"), verified, true).differsAt,
            "module output fc (call 0, output 0) of step 6");
}

TEST(Recomputation, ASecondRunThatFailedOtherwiseTellsNothing) {
  ReplayReport failed;
  failed.attached = true;
  Recomputation r = compareComputations(divergence(6, "fc", "0x2"), failed, false);
  EXPECT_FALSE(r.agreed);
  EXPECT_EQ(r.differsAt, "");
  EXPECT_FALSE(compareComputations(divergence(6, "fc", "0x2"), ReplayReport{}, true).ran);
}

TEST(ReplayOutcome, ANonDeterministicStepIsNamedNotBlamedOnTheSnapshot) {
  ReplayFacts f = atEnd(0, 10);
  f.jumpStep = 6;
  f.report.divergence = divergence(6, "fc", "0x2");
  f.recomputation = compareComputations(*f.report.divergence, diverged(divergence(6, "fc", "0x3")), false);
  ReplayOutcome o = decideReplayOutcome(f);
  EXPECT_EQ(o.exitCode, kExitDivergence);
  EXPECT_NE(o.message.find("the computation is non-deterministic: computed twice from the same restored state (the "
                           "snapshot of step 6), it differs at module output fc (call 0, output 0) of step 6"),
            std::string::npos)
      << o.message;
  EXPECT_EQ(o.message.find("was not restored"), std::string::npos);
  f.recomputation = compareComputations(*f.report.divergence, diverged(divergence(6, "fc", "0x2")), false);
  o = decideReplayOutcome(f);
  EXPECT_NE(o.message.find("was not restored (a second computation from the snapshot computed the same: the step is "
                           "deterministic)"),
            std::string::npos)
      << o.message;
}

TEST(ReplayOutcome, StateTheSnapshotMissesMayShowStepsAfterTheJump) {
  // A hand-written LR rule (Python-side state) acts at an epoch's end, two steps after the jump.
  ReplayFacts f = atEnd(2, 16);
  f.jumpStep = 4;
  f.report.divergence = divergence(6, "fc", "0x2");
  f.recomputation = compareComputations(*f.report.divergence, diverged(divergence(6, "fc", "0x2")), false);
  ReplayOutcome o = decideReplayOutcome(f);
  EXPECT_EQ(o.exitCode, kExitDivergence);
  EXPECT_EQ(o.message.rfind("jump replay diverged at step 6, after the jump to step 4 (last verified step 5): ", 0), 0u)
      << o.message;
  EXPECT_NE(o.message.find("was not restored and may have changed it (a second computation from the snapshot "
                           "computed the same: the step is deterministic); run with --from start for a full replay"),
            std::string::npos)
      << o.message;
  f.report.exception = "KeyError: 'k'";  // an exception the recording did not have: that is named first
  o = decideReplayOutcome(f);
  EXPECT_EQ(o.message.rfind("diverged at step 6: the replayed job raised KeyError", 0), 0u) << o.message;
}

}  // namespace
}  // namespace dlrr
