// replayer/ReplayReport: the one codec of the report between the replayed job and dlreplay.
#include <gtest/gtest.h>

#include <algorithm>

#include "replayer/ReplayReport.h"

namespace dlrr {
namespace {

TEST(ReplayReport, ValuesWithTabsNewlinesAndBackslashesRoundTrip) {
  ReportLines r;
  r.add("stop", "nan").add("verified_steps", 36).add("divergence.detail", "a\tb\nc\\d");
  r.add("fact\twith tab", "x").add("warning", "first").add("warning", "second\nline");
  EXPECT_EQ(std::count(r.text().begin(), r.text().end(), '\n'), 6);  // one entry a line
  auto m = parseReplayReport(r.text());
  EXPECT_EQ(m["stop"], "nan");
  EXPECT_EQ(m["verified_steps"], "36");
  EXPECT_EQ(m["divergence.detail"], "a\tb\nc\\d");
  EXPECT_EQ(m["fact\twith tab"], "x");
  EXPECT_EQ(m["warning"], "first\nsecond\nline");  // repeated keys accumulate
}

TEST(ReplayReport, ATornLastLineIsSkipped) {
  auto m = parseReplayReport("stop\tend\nverified_steps\t4\nrecorded_st");
  EXPECT_EQ(m.size(), 2u);
  EXPECT_EQ(m["verified_steps"], "4");
  EXPECT_TRUE(parseReplayReport("").empty());
}

}  // namespace
}  // namespace dlrr
