#pragma once
// What one recorded stream holds, read once from the stream and never changed after (rr's
// TraceReader, indexed): the small per-step facts a replay looks up (digests, losses, batch
// metadata, RNG and blob references, collectives, launches, the failure) and where each bulky
// event lies (its frame and position), so that batches, snapshots and kept tensors are read
// and encoded on demand rather than held. Safe to share between threads: the facts are
// immutable, and the reads on demand go through one lock of its own (the stream reader is
// not thread-safe), a leaf lock that nothing else is taken under.
#include <climits>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "format/Hash.h"
#include "format/StreamReader.h"
#include "replayer/LaunchCompare.h"

namespace dlrr {

struct RecordedDigest {
  uint64_t hash = 0;
  uint64_t nanCount = 0;
  uint64_t infCount = 0;
  double min = 0;
  double max = 0;
  std::string dtype;
  std::vector<int64_t> shape;
  int algorithm = 0;  // TensorDigest.Algorithm: 0 xxh3, 1 deviceSum
};

// A recorded Failure event, as the replay target needs it.
struct RecordedFailure {
  int kind = 0;  // schema Failure.Kind
  int64_t step = -1;
  std::string where;
  int digestKind = 0;
  uint32_t callIndex = 0;
  int signal = 0;
  std::string exceptionType;
  bool whileLoading = false;  // its traceback passes through torch.utils.data
};

// Where an event lies: the EVENTS frame that holds it and its position in that frame.
struct EventRef {
  uint64_t frame = 0;
  uint32_t ordinal = 0;
};

class RecordingIndex {
 public:
  using BatchKey = std::pair<uint32_t, uint64_t>;  // loader, index
  // step, kind, path, call, output
  using DigestKey = std::tuple<int64_t, int, std::string, uint32_t, uint32_t>;
  struct RngRef {
    int kind = 0;
    int device = 0;
    Hash128 hash{};
    uint64_t size = 0;
  };
  struct Entropy {
    int source = 0;
    size_t requested = 0;
    std::vector<uint8_t> data;
  };
  struct Batch {
    EventRef event;
    int64_t step = -1;       // the step its StepBegin named it for (-1: none did)
    int64_t eventStep = -1;  // the step the Batch event was stamped with
    bool training = false;
    bool byReference = false;
    bool bytesInTrace = true;  // by reference: every tensor blob is in the stream
    uint64_t digest = 0;       // session/BatchDigest (by reference)
    std::vector<uint64_t> sampleDigests;
    std::vector<int64_t> sampleIndices;
    std::vector<RngRef> rng;  // the states taken as it was delivered
  };
  struct CollectiveTensor {
    std::string dtype;
    std::vector<int64_t> shape;
    uint64_t hash = 0, nanCount = 0, infCount = 0;
    Hash128 blob{};
    uint64_t blobSize = 0;  // 0: bytes not kept
  };
  struct Collective {
    std::string op, group, reduceOp, status;
    int peer = -1, bucket = -1;
    int64_t step = -1;
    std::vector<CollectiveTensor> inputs, results;
  };
  struct KeptTensor {
    std::string key;  // "kind:path#call.output"
    EventRef event;
  };

  // Reads the whole stream once. Digests of steps before `digestsFrom` are left out (a jump
  // replay fast-forwards them: never compared). Throws TraceError.
  explicit RecordingIndex(StreamReader& stream, int64_t digestsFrom = INT64_MIN);
  RecordingIndex(const RecordingIndex&) = delete;
  RecordingIndex& operator=(const RecordingIndex&) = delete;

  const std::vector<Entropy>& entropy() const { return entropy_; }
  const Batch* batch(uint32_t loader, uint64_t index) const;
  const std::map<BatchKey, Batch>& batches() const { return batches_; }
  const std::map<int64_t, EventRef>& snapshots() const { return snapshots_; }
  int64_t iteratorLength(uint32_t loader, uint32_t iteration) const;
  const std::vector<RngRef>* rngAtStep(int64_t step) const;
  const std::vector<RngRef>& rngAtFork() const { return forkRng_; }
  const RecordedDigest* digest(const DigestKey& k) const;
  const std::map<DigestKey, RecordedDigest>& digests() const { return digests_; }
  // Digests recorded between a step's StepBegin and its StepEnd: all must be recomputed.
  uint32_t digestsInStep(int64_t step) const;
  std::optional<double> loss(int64_t step) const;
  const char* runtimeInfo(const std::string& key) const;
  int64_t recordedSteps() const { return recordedSteps_; }
  int64_t lastStepBegun() const { return lastStepBegun_; }
  const std::map<uint64_t, Collective>& collectives() const { return collectives_; }
  const std::vector<KernelLaunch>* launches(int64_t step) const;
  bool hasLaunches() const { return !launches_.empty(); }
  // The first Failure event, and the first non-finite one.
  const std::optional<RecordedFailure>& firstFailure() const { return firstFailure_; }
  const std::optional<RecordedFailure>& firstNonfinite() const { return firstNonfinite_; }
  // The first exception or fatal signal, also after a non-finite failure.
  const std::optional<RecordedFailure>& firstCrash() const { return firstCrash_; }
  int rank() const;

  // ---- Read on demand (under the index's reader lock). The encodings are BatchEncoding's.
  // A blob whose bytes are missing throws (whole or nothing), unless zerosForMissing: then
  // zeros of its size stand in (a fast-forwarded step's batch outside the window).
  std::vector<uint8_t> encodeBatch(const Batch& b, bool zerosForMissing) const;
  std::vector<uint8_t> encodeSnapshot(int64_t step) const;  // empty when none
  // Whether every tensor of the snapshot of `step` is still in the trace: a budgeted trace drops
  // old snapshots' bulk files (format/TraceDir.h), and such a snapshot starts no replay.
  bool snapshotComplete(int64_t step) const;
  // The kept tensors of `step` as a dict key -> tensor ('D' with no entries when none).
  std::vector<uint8_t> encodeKeptTensors(int64_t step) const;
  std::vector<uint8_t> readBlob(const Hash128& h, uint64_t size) const;
  // Whether the stream holds that blob (a --window result the job outlived keeps only its digest).
  bool hasBlob(const Hash128& h) const;

  // fork(): the reader lock is held across it so a child never inherits it held.
  void lockForFork() const noexcept { readMu_.lock(); }
  void unlockAfterFork() const noexcept { readMu_.unlock(); }

 private:
  // The Value of a Batch, Snapshot or FullTensor event, copied out of its frame.
  template <typename Fn>
  void withEvent(EventRef r, Fn&& fn) const;

  StreamReader& stream_;
  mutable std::mutex readMu_;  // stream_ (leaf: nothing is locked under it)

  std::vector<Entropy> entropy_;
  std::map<BatchKey, Batch> batches_;
  std::map<int64_t, EventRef> snapshots_;  // by step; a periodic one wins over the failure one
  std::map<std::pair<uint32_t, uint32_t>, int64_t> iteratorLengths_;
  std::map<int64_t, std::vector<RngRef>> stepRng_;
  std::vector<RngRef> forkRng_;
  std::map<DigestKey, RecordedDigest> digests_;
  std::map<int64_t, uint32_t> digestsPerStep_;
  std::map<int64_t, double> losses_;
  std::map<std::string, std::string> runtime_;
  int64_t recordedSteps_ = 0;
  int64_t lastStepBegun_ = -1;
  std::map<int64_t, std::vector<KeptTensor>> kept_;
  std::map<uint64_t, Collective> collectives_;
  std::map<int64_t, std::vector<KernelLaunch>> launches_;
  std::optional<RecordedFailure> firstFailure_, firstNonfinite_, firstCrash_;
};

// The report's name of a schema TensorDigest.Kind ("module output", "gradient", ...).
const char* digestKindName(int kind);

}  // namespace dlrr
