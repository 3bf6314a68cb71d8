#pragma once
// What the replayed process recomputes, checked against the recording (RecordingIndex): tensor
// digests, losses, that a step recomputed every digest it recorded, and the collectives of
// torch.distributed; the first divergence is kept and never replaced. A step before the jump
// step (fast-forwarded) or from the --what-if step on (changed on purpose) is not compared.
// Its own lock; the only lock taken under it is the report writer's (through `warn`).
#include <climits>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "replayer/RecordingIndex.h"
#include "session/TensorDigest.h"

namespace dlrr {

struct Divergence {
  int64_t step = -1;
  int kind = 0;  // schema TensorDigest.Kind
  std::string path;
  uint32_t callIndex = 0;
  uint32_t output = 0;
  std::string detail;  // "hash 0x.. != 0x..; NaN 0 vs 3; min/max ..."
};

class ReplayVerifier {
 public:
  using Warn = std::function<void(const std::string&)>;
  // `index` null: nothing recorded (a process that replays nothing): nothing is in the recording.
  ReplayVerifier(const RecordingIndex* index, int64_t jumpStep, int64_t whatIfStep, Warn warn);

  // Whether `step` is compared at all (not fast-forwarded, not changed by --what-if).
  bool compares(int64_t step) const { return step >= jumpStep_ && step < whatIfStep_; }
  void beginStep(int64_t step);
  // The step begun and not yet ended (INT64_MIN: none).
  int64_t openStep() const;
  // 0 match, 1 differs (first divergence kept), 2 not in the recording (or computed with
  // another algorithm than recorded: not comparable).
  int checkDigest(int64_t step, int kind, const std::string& path, uint32_t callIndex, uint32_t output, int algorithm,
                  const DigestResult& got);
  // The loss and the count of digests recomputed. 0 when the step matched everywhere.
  int endStep(int64_t step, double loss);
  // A divergence found elsewhere (the hook, from values it computed): kept when the first.
  void diverge(const Divergence& d);
  std::optional<Divergence> divergence() const;

  // torch.distributed: collectives numbered in issue order, as in record. A jump replay numbers
  // from the recording's first collective of the jump step; before it, every collective is
  // kFastForwardedCollective (nothing served or checked).
  static constexpr uint64_t kFastForwardedCollective = ~uint64_t{0};
  uint64_t beginCollective(const std::string& op, int64_t step);
  // The recorded collectives a replay from the jump issues again (all without a jump).
  uint64_t recordedCollectivesFromJump() const;
  int checkCollectiveTensor(uint64_t seq, bool result, const std::string& dtype, const std::vector<int64_t>& shape,
                            const DigestResult& got, int64_t step);

  struct Figures {
    int64_t verifiedSteps = 0;
    int64_t lastStepEnded = -1;
    std::optional<Divergence> divergence;
    uint64_t incomparableDigests = 0;
    uint64_t collectivesIssued = 0;
    uint64_t collectiveTensorsVerified = 0;
  };
  Figures figures() const;

  void lockForFork() noexcept { mu_.lock(); }
  void unlockAfterFork() noexcept { mu_.unlock(); }

 private:
  void divergeLocked(Divergence d);

  const RecordingIndex* index_;
  const int64_t jumpStep_;
  const int64_t whatIfStep_;
  Warn warn_;
  mutable std::mutex mu_;
  std::optional<Divergence> divergence_;
  int64_t verifiedSteps_ = 0;
  int64_t lastStepEnded_ = -1;
  int64_t openStep_ = INT64_MIN;
  std::map<int64_t, uint32_t> seenPerStep_;
  uint64_t incomparableDigests_ = 0;
  uint64_t nextCollective_ = 0;
  bool collectivesResynced_ = false;  // numbering set to the jump step's first recorded collective
  uint64_t collectivesIssued_ = 0;
  uint64_t collectiveTensorsVerified_ = 0;
  std::map<uint64_t, std::pair<uint32_t, uint32_t>> collectiveSeen_;  // inputs, results checked so far
};

}  // namespace dlrr
