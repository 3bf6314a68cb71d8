#include <gtest/gtest.h>

#include "replayer/ReplayTarget.h"

namespace dlrr {
namespace {

TEST(ReplayTarget, Parses) {
  std::string err;
  EXPECT_EQ(parseReplayTarget("nan", err)->kind, ReplayTarget::Kind::Nan);
  EXPECT_EQ(parseReplayTarget("crash", err)->kind, ReplayTarget::Kind::Crash);
  EXPECT_EQ(parseReplayTarget("end", err)->kind, ReplayTarget::Kind::End);
  auto s = parseReplayTarget("step=41230", err);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->step, 41230);
  EXPECT_EQ(s->describe(), "step=41230");
}

TEST(ReplayTarget, RejectsWithAClearMessage) {
  std::string err;
  EXPECT_FALSE(parseReplayTarget("step=-3", err));
  EXPECT_NE(err.find("N >= 0"), std::string::npos);
  EXPECT_FALSE(parseReplayTarget("step=", err));
  EXPECT_FALSE(parseReplayTarget("step=1x", err));
  EXPECT_FALSE(parseReplayTarget("step=+7", err));  // only digits: what describe() prints back
  EXPECT_FALSE(parseReplayTarget("step= 7", err));
  EXPECT_NE(err.find("whole number"), std::string::npos);
  EXPECT_FALSE(parseReplayTarget("step=99999999999999999999999", err));
  EXPECT_FALSE(parseReplayTarget("nans", err));
  EXPECT_NE(err.find("use nan, step=N, crash or end"), std::string::npos);
}

}  // namespace
}  // namespace dlrr
