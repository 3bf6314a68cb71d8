#include <gtest/gtest.h>

#include <cmath>

#include "format/Trace.h"
#include "format/TraceError.h"
#include "support/SampleTrace.h"

namespace dlrr {
namespace {

using testing::makeTempDir;
using testing::removeTree;
using testing::writeSampleTrace;

TEST(FormatRoundTrip, SampleTraceSummarises) {
  std::string dir = makeTempDir("rt") + "/t";
  testing::SampleOptions o;
  o.steps = 6;
  o.nanAtStep = 4;
  writeSampleTrace(dir, o);
  auto t = Trace::open(dir);
  auto s = t->summarize();
  EXPECT_EQ(s.steps, 6u);
  ASSERT_TRUE(s.failure.has_value());
  EXPECT_EQ(s.failure->kind, "nonfinite");
  EXPECT_EQ(s.failure->step, 4);
  EXPECT_EQ(s.failure->where, "fc1");
  ASSERT_TRUE(s.exitCode.has_value());
  EXPECT_EQ(*s.exitCode, 0);
  EXPECT_EQ(s.command, (std::vector<std::string>{"python3", "train.py"}));
  auto steps = t->steps(*t->mainStream());
  ASSERT_EQ(steps.size(), 6u);
  EXPECT_TRUE(std::isnan(steps[4].loss));
  EXPECT_DOUBLE_EQ(steps[1].loss, 1.0);
  EXPECT_EQ(steps[0].batchBytes, 256u * 4 + 8);  // the tensor and the int label
  for (auto& st : t->streams()) {
    EXPECT_TRUE(st->status().cleanClose) << st->name();
    EXPECT_TRUE(st->verify().empty());
  }
  removeTree(dir);
}

}  // namespace
}  // namespace dlrr
