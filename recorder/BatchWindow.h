#pragma once
// The batch window of a bounded trace (docs/recording.md, "Batches by reference"): the bytes
// of the batches recorded by reference, kept in memory for the last steps and written only
// when the job fails or exits. It is made of segments, each starting where a data-less
// replay can start: a snapshot held with the window (or the job's first step) followed by the
// batches of the steps after it. The current and the previous segment are kept (so at least K
// steps lie between a segment start and the last step when snapshots come every K steps);
// beyond 2K batches the oldest go, and their segment can then no longer start a replay.
// A distributed rank recorded with digest collectives also keeps here the bytes of its
// collective results, per step, with the segment they belong to (docs/distributed.md, "One
// rank alone in the failure window"): a rank replayed alone from a segment's start is served
// them, so they go with the segment, and a segment that can no longer start a replay drops them.
#include <capnp/message.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "format/Hash.h"

namespace dlrr {

class BatchWindow {
 public:
  struct Blob {
    Hash128 hash;
    std::vector<uint8_t> bytes;
    unsigned elemSize = 1;
  };
  struct StepBlobs {
    int64_t step = 0;
    std::vector<Blob> blobs;
  };
  struct Segment {
    int64_t startStep = 0;  // the step a data-less replay starts at
    bool startable = true;  // its snapshot (or the job's start) and every batch since are held
    std::unique_ptr<capnp::MallocMessageBuilder> snapshot;  // the held Snapshot event (null: job start)
    std::vector<Blob> snapshotBlobs;
    std::deque<std::vector<Blob>> batches;  // one entry per batch, oldest first
    std::deque<StepBlobs> collectives;      // collective results, one entry per step, oldest first
    uint64_t bytes = 0;
    uint64_t collectiveBytes = 0;  // of bytes
  };

  explicit BatchWindow(int steps) : steps_(steps) {}
  int steps() const { return steps_; }

  // A batch or held snapshot being recorded: keep(...) adds its blobs, then one of the ends.
  void keep(const Hash128& h, const void* data, size_t n, unsigned elemSize);
  void endBatch(int64_t step);
  void endSnapshot(int64_t step, std::unique_ptr<capnp::MallocMessageBuilder> event);
  void discardPending() { pending_.clear(); }
  // A collective result of `step`: false when the window cannot hold it (its segment can no
  // longer start a replay, or spans more than 2K steps): the caller keeps only its digest.
  bool keepCollective(int64_t step, const Hash128& h, const void* data, size_t n, unsigned elemSize);

  uint64_t bytesHeld() const;
  uint64_t peakBytes() const { return peak_; }
  uint64_t collectiveBytesHeld() const;
  uint64_t peakCollectiveBytes() const { return collectivePeak_; }
  // Hands over every segment (oldest first) and empties the window.
  std::deque<Segment> take();

 private:
  void trim();
  static void dropCollectives(Segment& s);

  int steps_;
  std::vector<Blob> pending_;
  std::deque<Segment> segments_;
  uint64_t peak_ = 0;
  uint64_t collectivePeak_ = 0;
};

}  // namespace dlrr
