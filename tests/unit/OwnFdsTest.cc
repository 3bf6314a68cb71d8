// The recorder's own fds (recorder/OwnFds.h): registered, found, listed sorted within a
// range, released; what the interposer's close()/close_range()/closefrom() rely on.
#include <gtest/gtest.h>

#include "recorder/OwnFds.h"

namespace dlrr {
namespace {

TEST(OwnFds, ProtectListAndRelease) {
  unprotectAllFds();
  EXPECT_FALSE(isProtectedFd(7));
  int out[16];
  EXPECT_EQ(protectedFdsIn(0, ~0u, out, 16), 0);
  for (int fd : {40, 7, 1000, 12}) protectFd(fd);
  protectFd(7);   // twice: one entry
  protectFd(-1);  // ignored
  EXPECT_TRUE(isProtectedFd(7));
  EXPECT_TRUE(isProtectedFd(1000));
  EXPECT_FALSE(isProtectedFd(8));
  ASSERT_EQ(protectedFdsIn(0, ~0u, out, 16), 4);
  EXPECT_EQ(out[0], 7);
  EXPECT_EQ(out[1], 12);
  EXPECT_EQ(out[2], 40);
  EXPECT_EQ(out[3], 1000);
  ASSERT_EQ(protectedFdsIn(12, 40, out, 16), 2);
  EXPECT_EQ(out[0], 12);
  EXPECT_EQ(out[1], 40);
  EXPECT_EQ(protectedFdsIn(13, 39, out, 16), 0);
  unprotectFd(12);
  EXPECT_FALSE(isProtectedFd(12));
  EXPECT_EQ(protectedFdsIn(0, ~0u, out, 16), 3);
  unprotectAllFds();
  EXPECT_FALSE(isProtectedFd(7));
  // More than the table holds: the first ones stay protected, nothing breaks.
  for (int fd = 100; fd < 140; ++fd) protectFd(fd);
  EXPECT_TRUE(isProtectedFd(100));
  EXPECT_EQ(protectedFdsIn(0, ~0u, out, 16), 16);
  unprotectAllFds();
}

}  // namespace
}  // namespace dlrr
