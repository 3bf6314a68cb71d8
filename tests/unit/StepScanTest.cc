// Which events `dltrace dump` / `events --step N` take for step N (tools/dltrace/StepScan.h):
// the failure ring's tensors of N come later, after the failing step's failure event (or, in
// older recordings, just before it).
#include <capnp/message.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tools/dltrace/StepScan.h"

namespace dlrr::tools {
namespace {

enum class Ev { Begin, End, Tensor, Failure, Note, Launch };

// Feeds (kind, step) events to a scan of `step`; returns what it took, stopping where it stops.
std::string scan(int64_t step, const std::vector<std::pair<Ev, int64_t>>& evs) {
  StepScan s(step);
  std::string took;
  for (auto [kind, st] : evs) {
    capnp::MallocMessageBuilder m;
    auto e = m.initRoot<schema::Event>();
    e.setStep(st);
    switch (kind) {
      case Ev::Begin:
        e.initStepBegin().setStep(st);
        break;
      case Ev::End:
        e.initStepEnd().setStep(st);
        break;
      case Ev::Tensor:
        e.initTensor();
        break;
      case Ev::Failure:
        e.initFailure().setStep(st);
        break;
      case Ev::Note:
        e.setNote("n");
        break;
      case Ev::Launch:
        e.initCudaLaunch();
        break;
    }
    auto v = s(e.asReader());
    if (v == StepScan::Verdict::Stop) break;
    if (v == StepScan::Verdict::Take)
      took += (kind == Ev::Tensor   ? "T"
               : kind == Ev::Begin  ? "B"
               : kind == Ev::End    ? "E"
               : kind == Ev::Launch ? "L"
                                    : "x") +
              std::to_string(st);
  }
  return took;
}

TEST(StepScan, GpuEventsDrainedAfterTheStepsEnd) {
  // GPU capture's drain thread writes a step's launches after the step ended, even after the
  // next one began (seen on an H100: `events --step 3` found none of step 3's copies).
  std::vector<std::pair<Ev, int64_t>> evs = {{Ev::Begin, 6},  {Ev::Tensor, 6}, {Ev::End, 6}, {Ev::Begin, 7},
                                             {Ev::Launch, 6}, {Ev::Launch, 7}, {Ev::End, 7}, {Ev::Begin, 8},
                                             {Ev::Launch, 7}, {Ev::Launch, 8}, {Ev::End, 8}};
  EXPECT_EQ(scan(6, evs), "B6T6E6L6");
  EXPECT_EQ(scan(7, evs), "B7L7E7L7");
  // A failure at the step: no ring follows, but the drain's launches still do, up to step N+2.
  std::vector<std::pair<Ev, int64_t>> failing = {{Ev::Begin, 6}, {Ev::Failure, 6}, {Ev::End, 6},
                                                 {Ev::Begin, 7}, {Ev::Launch, 6},  {Ev::End, 7},
                                                 {Ev::Begin, 8}, {Ev::Launch, 6},  {Ev::End, 8}};
  EXPECT_EQ(scan(6, failing), "B6x6E6L6");
}

TEST(StepScan, RingTensorsAfterALaterFailureEvent) {
  // Step 6 ends; step 7 fails: its failure event, then the ring (7 first, then 6), then the
  // rest of step 7 and its end.
  std::vector<std::pair<Ev, int64_t>> evs = {{Ev::Begin, 6},   {Ev::Tensor, 6}, {Ev::End, 6},    {Ev::Begin, 7},
                                             {Ev::Failure, 7}, {Ev::Tensor, 7}, {Ev::Tensor, 6}, {Ev::Note, 7},
                                             {Ev::Tensor, 7},  {Ev::End, 7},    {Ev::Tensor, 6}};
  EXPECT_EQ(scan(6, evs), "B6T6E6T6");  // the stray step-6 tensor after step 7's end is not the ring's
  EXPECT_EQ(scan(7, evs), "B7x7T7x7T7E7");
}

TEST(StepScan, RingTensorsBeforeTheFailureEventInOlderRecordings) {
  std::vector<std::pair<Ev, int64_t>> evs = {{Ev::Begin, 6},  {Ev::End, 6},    {Ev::Begin, 7},
                                             {Ev::Tensor, 6}, {Ev::Tensor, 7}, {Ev::Failure, 7}};
  EXPECT_EQ(scan(6, evs), "B6E6T6");
}

TEST(StepScan, NoRingAfterAFailureAtOrBeforeTheStep) {
  std::vector<std::pair<Ev, int64_t>> evs = {{Ev::Begin, 6}, {Ev::Failure, 6}, {Ev::Tensor, 6},
                                             {Ev::End, 6},   {Ev::Begin, 7},   {Ev::Tensor, 6}};
  EXPECT_EQ(scan(6, evs), "B6x6T6E6");
}

}  // namespace
}  // namespace dlrr::tools
