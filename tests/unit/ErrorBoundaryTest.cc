// The library's error boundary (interpose/ErrorBoundary.h): an error stopped at the edge is
// counted, and the first is in the trace (a RecorderStatus event) and in dlrr_status's count.
#include <gtest/gtest.h>
#include <kj/exception.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "format/Trace.h"
#include "interpose/ActiveSession.h"
#include "interpose/ErrorBoundary.h"
#include "support/SampleTrace.h"

namespace dlrr {
namespace {

TEST(ErrorBoundary, CountsEveryErrorAndRecordsTheFirstInTheTrace) {
  std::string dir = testing::makeTempDir("boundary");
  Config c;
  c.mode = Mode::Record;
  c.traceDir = dir + "/t";
  startProcessRecorder(c);
  ASSERT_NE(processRecorder(), nullptr);
  resetSwallowedAfterFork();

  bool ran = false;
  EXPECT_TRUE(guarded("dlrr_fine", [&] { ran = true; }));
  EXPECT_TRUE(ran);
  EXPECT_EQ(swallowedCount(), 0u);
  EXPECT_EQ(firstSwallowed(), "");

  EXPECT_FALSE(guarded("dlrr_first", [] { throw std::runtime_error("boom"); }));
  EXPECT_FALSE(guarded("dlrr_second", [] { KJ_FAIL_REQUIRE("kj says no"); }));
  try {
    throw 42;
  } catch (...) {
    DLRR_SWALLOWED();
  }
  EXPECT_EQ(swallowedCount(), 3u);
  EXPECT_NE(firstSwallowed().find("dlrr_first: boom"), std::string::npos) << firstSwallowed();

  processRecorder()->onExit(true, 0);
  std::vector<std::string> statuses;
  Trace::open(c.traceDir)->mainStream()->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
    if (e.isRecorderStatus() && !e.getRecorderStatus().getOk())
      statuses.push_back(e.getRecorderStatus().getMessage().cStr());
  });
  ASSERT_EQ(statuses.size(), 1u);  // the first only: the count says how many followed
  EXPECT_NE(statuses[0].find("dlrr_first: boom"), std::string::npos) << statuses[0];
  testing::removeTree(dir);
}

TEST(ErrorBoundary, ForkedChildCountsAgain) {
  try {
    throw std::runtime_error("x");
  } catch (...) {
    DLRR_SWALLOWED();
  }
  EXPECT_GT(swallowedCount(), 0u);
  resetSwallowedAfterFork();
  EXPECT_EQ(swallowedCount(), 0u);
  EXPECT_EQ(firstSwallowed(), "");
}

}  // namespace
}  // namespace dlrr
