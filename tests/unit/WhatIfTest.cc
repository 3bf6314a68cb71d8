// dlreplay --what-if: the change's parse and the verdict (issue 30 item 3).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include "tools/common/UsageError.h"
#include "tools/dlreplay/ReplayOptions.h"
#include "tools/dlreplay/ReplayOutcome.h"
#include "tools/dlreplay/WhatIf.h"

namespace dlrr {
namespace {

TEST(WhatIf, ParsesEachChange) {
  EXPECT_EQ(parseWhatIf("drop-sample=1365").text(), "drop-sample=1365");
  EXPECT_EQ(parseWhatIf("skip-step").kind, "skip-step");
  EXPECT_EQ(parseWhatIf("lr-scale=0.1").value, "0.1");
  EXPECT_EQ(parseWhatIf("clip-grad=1.0").value, "1.0");
  EXPECT_EQ(parseWhatIf("fp32").text(), "fp32");
  EXPECT_EQ(parseWhatIf("anomaly").text(), "anomaly");
}

TEST(WhatIf, RefusesBadChanges) {
  for (const char* bad :
       {"", "teleport", "skip-step=3", "fp32=1", "lr-scale", "lr-scale=", "lr-scale=-1", "lr-scale=0", "lr-scale=x",
        "clip-grad=nan", "drop-sample=-3", "drop-sample=1.5", "drop-sample=", "drop-sample=1234567890123456789012"})
    EXPECT_THROW(parseWhatIf(bad), tools::UsageError) << bad;
}

TEST(WhatIf, OptionsGoWithTheNanTargetAlone) {
  auto o = parseReplayOptions({"t.trace", "--what-if", "lr-scale=0.5", "--steps", "3"});
  EXPECT_EQ(o.whatIf, "lr-scale=0.5");
  EXPECT_EQ(o.until, "nan");
  EXPECT_EQ(o.whatIfSteps, 3);
  for (const std::vector<std::string>& bad : {std::vector<std::string>{"t.trace", "--steps", "3"},
                                              {"t.trace", "--what-if", "fp32", "--steps", "0"},
                                              {"t.trace", "--what-if", "fp32", "--check"},
                                              {"t.trace", "--what-if", "fp32", "--until", "end"},
                                              {"t.trace", "--what-if", "fp32", "--debug", "pdb"}})
    EXPECT_THROW(parseReplayOptions(bad), tools::UsageError);
}

ReplayReport withVerdict(const char* verdict) {
  ReplayReport r;
  r.attached = true;
  r.stop = ReplayReport::Stop::Target;
  if (verdict) r.whatIfVerdict = verdict;
  return r;
}

TEST(WhatIf, VerdictFromTheReport) {
  auto o = decideWhatIf(withVerdict("did not recur: steps 4-6 ..."), W_EXITCODE(0, 0), "fp32");
  EXPECT_EQ(o.exitCode, kExitOk);
  EXPECT_EQ(o.outcome, "prevented");
  EXPECT_EQ(o.message, "what-if fp32: the failure did not recur: steps 4-6 ...");
  o = decideWhatIf(withVerdict("recurred at step 4: loss loss not finite"), W_EXITCODE(0, 0), "fp32");
  EXPECT_EQ(o.exitCode, kExitWhatIfRecurred);
  EXPECT_EQ(o.outcome, "recurred");
}

TEST(WhatIf, AReplayThatNeverGotToTheChangeIsNoVerdict) {
  EXPECT_EQ(decideWhatIf(ReplayReport{}, W_EXITCODE(0, 0), "fp32").exitCode, kExitNoReplay);
  auto o = decideWhatIf(withVerdict(nullptr), W_EXITCODE(0, SIGKILL), "fp32");
  EXPECT_EQ(o.exitCode, kExitNotReached);
  EXPECT_NE(o.message.find("signal 9"), std::string::npos);
  ReplayReport d = withVerdict("did not recur: ...");  // a divergence before the change wins
  d.divergence = ReplayReport::Divergence{2, "loss", "loss", "recorded 1, replayed 2"};
  o = decideWhatIf(d, W_EXITCODE(0, 0), "fp32");
  EXPECT_EQ(o.exitCode, kExitDivergence);
  EXPECT_NE(o.message.find("diverged at step 2 before the change"), std::string::npos);
}

}  // namespace
}  // namespace dlrr
