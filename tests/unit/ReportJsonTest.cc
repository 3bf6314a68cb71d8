// dlreplay --json's "report": integers are JSON numbers, texts strings (issue 32: they were all
// strings, "last_step":"9").
#include <gtest/gtest.h>

#include "tools/dlreplay/ReportJson.h"

namespace dlrr {
namespace {

std::string json(const ReplayReport& r) {
  std::string out;
  tools::JsonWriter j(out, 0);
  writeReportJson(j, r);
  return out;
}

TEST(ReportJson, IntegersAreNumbersAndTextsStrings) {
  ReplayReport r;
  r.attached = true;
  r.target = "nan";
  r.targetStep = 30;
  r.verifiedSteps = 30;
  r.recordedSteps = 128;
  r.lastStep = 29;
  r.jumpStep = 20;
  r.divergence = ReplayReport::Divergence{31, "loss", "", "7 vs 8"};
  r.launchDivergence = ReplayReport::LaunchDivergence{-1, 4, "x"};
  r.incomparableDigests = 2;
  r.dist = ReplayReport::Dist{1, 3, 5, 4, 2};
  ASSERT_TRUE(addHookFact(r, "stop.step", "30"));
  ASSERT_TRUE(addHookFact(r, "env.threads", "1"));  // a text that happens to be a number stays one
  ASSERT_TRUE(addHookFact(r, "batch.samples", "sample 5"));
  ASSERT_TRUE(addHookFact(r, "batch.samples", "sample 6"));
  std::string s = json(r);
  for (const char* want :
       {R"("target.step":30,)", R"("verified_steps":30})", R"("recorded_steps":128,)", R"("last_step":29,)",
        R"("jump.step":20,)", R"("divergence.step":31,)", R"("launch.divergence.step":-1,)",
        R"("launch.divergence.position":4,)", R"("digests.incomparable":2,)", R"("dist.rank":1,)", R"("stop.step":30,)",
        R"("divergence.detail":"7 vs 8")", R"("env.threads":"1")", R"("batch.samples":"sample 5\nsample 6")",
        R"("target":"nan")"})
    EXPECT_NE(s.find(want), std::string::npos) << want << " in " << s;
}

TEST(ReportJson, BetweenStepsIsNullAndNoReportIsEmpty) {
  ReplayReport r;
  r.attached = true;
  ASSERT_TRUE(addHookFact(r, "stop.step", "-"));
  EXPECT_NE(json(r).find(R"("stop.step":null)"), std::string::npos) << json(r);
  ReplayReport odd;  // a hook of another version saying something else: kept as it said it
  odd.attached = true;
  ASSERT_TRUE(addHookFact(odd, "stop.step", "7b"));
  EXPECT_NE(json(odd).find(R"("stop.step":"7b")"), std::string::npos) << json(odd);
  EXPECT_EQ(json(ReplayReport{}), "{}");
}

TEST(ReportJson, EveryIntegerEntryOfAFullReportIsOne) {
  ReplayReport r;
  r.attached = true;
  r.jumpStep = 1;
  r.divergence = ReplayReport::Divergence{3, "k", "p", "d"};
  r.launches = ReplayReport::Launches{3, 2};
  r.launchDivergence = ReplayReport::LaunchDivergence{1, 4, "d"};
  r.incomparableDigests = 2;
  r.dist = ReplayReport::Dist{1, 3, 5, 4, 2};
  int integers = 0;
  for (const auto& [k, v] : reportEntries(r)) {
    bool digits = !v.empty() && v.find_first_not_of("-0123456789") == std::string::npos;
    EXPECT_EQ(isIntegerEntry(k), digits) << k << " = " << v;
    integers += isIntegerEntry(k);
  }
  EXPECT_EQ(integers, 12);  // every to_string of reportEntries (stop.step is the hook's)
}

}  // namespace
}  // namespace dlrr
