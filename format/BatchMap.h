#pragma once
// What a bounded trace can replay (docs/replay.md, "Bounded traces"): with the dataset present
// every recorded step (batches by reference are re-made and checked); without it, only the
// steps from a start (the job's first step or a snapshot) on whose batches all have their bytes
// in the trace. Pure: dltrace info and the replayer feed it what they read.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace dlrr {

struct BatchMap {
  struct Range {
    int64_t first = 0;
    int64_t last = 0;
    int64_t snapshot = -1;  // the snapshot it starts from (-1: the job's first step)
  };
  int64_t lastStep = -1;           // last step with a batch (-1: none)
  uint64_t byReference = 0;        // batches recorded by reference
  uint64_t bytesMissing = 0;       // of which the trace holds no bytes
  std::vector<Range> withoutData;  // ranges replayable without the dataset, oldest first

  // One line for people: "steps 0-99 replay with the dataset present; steps 90-99 also without
  // it (from the snapshot of step 90)".
  std::string describe() const;
  // The range holding `step` (nullptr: not replayable without the dataset).
  const Range* rangeOf(int64_t step) const;
};

class BatchMapBuilder {
 public:
  void batch(int64_t step, bool byReference, bool bytesPresent);
  void snapshot(int64_t step) { snapshots_.insert(step); }
  BatchMap build() const;

 private:
  std::map<int64_t, bool> steps_;  // step -> every batch of it has its bytes
  std::set<int64_t> snapshots_;
  uint64_t byReference_ = 0;
  uint64_t missing_ = 0;
};

}  // namespace dlrr
