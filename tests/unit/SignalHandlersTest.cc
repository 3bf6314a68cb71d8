#include <gtest/gtest.h>

#include <cstdint>

#include "interpose/SignalHandlers.h"

namespace dlrr {
namespace {

constexpr uint64_t kTrampoline = 0x7000;

TEST(FaultFrameIndex, TheFrameAfterTheLastSignalFrame) {
  // A fault re-raised by Python's faulthandler: our handler sees its own signal frame, raise()
  // and pthread_kill, faulthandler's signal frame, then the faulting frame and its callers.
  const uint64_t reraised[] = {kTrampoline, 0x100, 0x200, kTrampoline, 0x300, 0x400, 0x500};
  EXPECT_EQ(faultFrameIndex(reraised, 7, kTrampoline), 4);
  // A fault that reached us first: our signal frame, then the faulting frame.
  const uint64_t direct[] = {kTrampoline, 0x300, 0x400};
  EXPECT_EQ(faultFrameIndex(direct, 3, kTrampoline), 1);
  // A handler frame of ours before the signal frame (an unwinder that does not skip it).
  const uint64_t withHandler[] = {0x900, kTrampoline, 0x300};
  EXPECT_EQ(faultFrameIndex(withHandler, 3, kTrampoline), 2);
}

TEST(FaultFrameIndex, NoSignalFrameOrNothingAfterItIsTheInnermost) {
  const uint64_t none[] = {0x100, 0x200};
  EXPECT_EQ(faultFrameIndex(none, 2, kTrampoline), 0);
  EXPECT_EQ(faultFrameIndex(none, 2, 0), 0);  // restorer unknown
  const uint64_t last[] = {0x100, kTrampoline};
  EXPECT_EQ(faultFrameIndex(last, 2, kTrampoline), 0);
  EXPECT_EQ(faultFrameIndex(nullptr, 0, kTrampoline), 0);
  const uint64_t zeros[] = {0, 0x100};
  EXPECT_EQ(faultFrameIndex(zeros, 2, 0), 0);  // a 0 frame is not the unknown restorer
}

}  // namespace
}  // namespace dlrr
