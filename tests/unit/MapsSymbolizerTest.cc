// The /proc/self/maps symbolizer of the fatal-signal path (recorder/MapsSymbolizer).
#include <gtest/gtest.h>

#include <string>

#include "recorder/MapsSymbolizer.h"

namespace dlrr {
namespace {

const char kMaps[] =
    "55d0a000-55d0b000 r-xp 00001000 08:01 1234 /usr/bin/python3.11\n"
    "7f00a000-7f00c000 r-xp 00020000 08:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
    "7ffd0000-7ffd1000 rw-p 00000000 00:00 0 \n";

std::string name(uint64_t ip, size_t cap = 512) {
  char out[512];
  size_t n = describeIp(ip, kMaps, sizeof kMaps - 1, out, cap);
  EXPECT_EQ(out[n], '\0');
  return std::string(out, n);
}

TEST(MapsSymbolizer, FileAndOffsetInIt) {
  EXPECT_EQ(name(0x55d0a010), "python3.11+0x1010");
  EXPECT_EQ(name(0x7f00b234), "libc.so.6+0x21234");
}

TEST(MapsSymbolizer, AnonymousMappingAndUnmappedAddress) {
  EXPECT_EQ(name(0x7ffd0008), "[anon]+0x8");
  EXPECT_EQ(name(0x1000), "0x1000");
}

TEST(MapsSymbolizer, LongNamesAreCutToFit) {
  std::string s = name(0x7f00b234, 24);
  EXPECT_LT(s.size(), 24u);
  EXPECT_NE(s.find("+0x21234"), std::string::npos);
}

TEST(MapsSymbolizer, ReadsOwnMaps) {
  char buf[1 << 16];
  EXPECT_GT(readFileInto("/proc/self/maps", buf, sizeof buf), 0u);
  EXPECT_EQ(readFileInto("/nonexistent", buf, sizeof buf), 0u);
  EXPECT_EQ(readFdInto(-1, buf, sizeof buf), 0u);
}

}  // namespace
}  // namespace dlrr
