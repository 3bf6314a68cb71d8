// DLRR_ASSERT / DLRR_REQUIRE (format/Check.h): a failed check says where and with what values,
// and an assertion stopped at the library's edge carries that text into the count's first entry.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "format/Check.h"
#include "interpose/ErrorBoundary.h"

namespace dlrr {
namespace {

std::string assertText(int n, int cap, uint8_t b, const std::string& name) {
  try {
    DLRR_ASSERT(n <= cap, n, std::min(n, cap), b, name);
  } catch (const InternalError& e) {
    return e.what();
  }
  return "";
}

TEST(Check, AssertPassesSilently) {
  EXPECT_NO_THROW(DLRR_ASSERT(1 + 1 == 2));
  EXPECT_NO_THROW(DLRR_ASSERT(true, 7));
}

TEST(Check, AssertNamesFileLineConditionAndValues) {
  std::string t = assertText(9, 8, 200, "w");
  EXPECT_NE(t.find("tests/unit/CheckTest.cc:"), std::string::npos) << t;
  EXPECT_EQ(t.find("/work"), std::string::npos) << "the path is relative to the source tree: " << t;
  EXPECT_NE(t.find("assertion failed: n <= cap [n = 9, std::min(n, cap) = 8, b = 200, name = 'w']"), std::string::npos)
      << t;
}

TEST(Check, AssertWithoutValues) {
  try {
    DLRR_ASSERT(2 < 1);
    FAIL() << "did not throw";
  } catch (const InternalError& e) {
    std::string t = e.what();
    EXPECT_TRUE(t.ends_with("assertion failed: 2 < 1")) << t;
  }
}

TEST(Check, RequireIsATraceErrorOfItsKindWithoutASourcePosition) {
  size_t stored = 10, raw = 12;
  try {
    DLRR_REQUIRE(stored == raw, ErrorKind::Corrupt, "lengths differ", stored, raw);
    FAIL() << "did not throw";
  } catch (const TraceError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Corrupt);
    EXPECT_STREQ(e.what(), "lengths differ [stored = 10, raw = 12]");
  }
  EXPECT_NO_THROW(DLRR_REQUIRE(stored < raw, ErrorKind::Corrupt, "never"));
}

TEST(Check, AnAssertionAtTheEdgeIsCountedWithItsContext) {
  resetSwallowedAfterFork();
  std::vector<int> v{1, 2};
  EXPECT_FALSE(guarded("dlrr_check_test", [&] { DLRR_ASSERT(v.size() == 3, v.size()); }));
  EXPECT_EQ(swallowedCount(), 1u);
  std::string first = firstSwallowed();
  EXPECT_NE(first.find("internal error in dlrr_check_test"), std::string::npos) << first;
  EXPECT_NE(first.find("assertion failed: v.size() == 3 [v.size() = 2]"), std::string::npos) << first;
  resetSwallowedAfterFork();
}

}  // namespace
}  // namespace dlrr
