#pragma once
// One per replayed process: serves what the recording saw (entropy, batches, RNG states),
// checks what the process recomputes against the recorded digests, and writes the report
// that dlreplay shows. The Python hook drives it through the replay half of dlrr.h.
#include <capnp/message.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "format/BatchMap.h"
#include "format/Trace.h"
#include "replayer/BatchEncoding.h"
#include "replayer/LaunchCompare.h"
#include "replayer/ReplayReport.h"
#include "replayer/ReplayTarget.h"
#include "schema/dlrr.capnp.h"
#include "session/BatchDigest.h"
#include "session/Config.h"
#include "session/ProcessSession.h"
#include "session/StepObserver.h"
#include "session/TensorDigest.h"

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

struct Divergence {
  int64_t step = -1;
  int kind = 0;  // schema TensorDigest.Kind
  std::string path;
  uint32_t callIndex = 0;
  uint32_t output = 0;
  std::string detail;  // "hash 0x.. != 0x..; NaN 0 vs 3; min/max ..."
};

// DLRR_REPLAY_STREAM value of dlreplay --all-ranks: each rank process replays its own stream.
inline constexpr const char* kEachRank = "@rank";

class ReplaySession final : public ProcessSession {
 public:
  // Opens the trace and loads the named stream. Throws TraceError.
  ReplaySession(const Config& cfg, const std::string& until);
  ~ReplaySession() override;

  // True when this process is the one the stream recorded (argv matches). Other processes of
  // the replayed command (a launcher shell, a helper tool) run untouched.
  Mode mode() const noexcept override { return Mode::Replay; }
  bool active() const noexcept override { return active_; }
  void deactivate() noexcept { active_ = false; }
  // fork() (interpose/Interposer.cc's pthread_atfork handlers): the prepare handler takes mu_
  // (beforeFork), the parent's and the child's handlers release it, so a child never inherits
  // it held by a thread it does not have. mu_ is the session's only lock; FileRedirect's is
  // taken before it (the two never nest).
  void beforeFork() noexcept;
  void afterForkParent() noexcept;
  // In a forked child: a multiprocessing.Process the job started (a Hogwild trainer) whose
  // identity is the stream's takes it over (loading it now); any other fork (a DataLoader
  // worker) runs unreplayed.
  void afterForkChild() noexcept;
  const ReplayTarget& target() const { return target_; }
  // The recorded fatal signal when the target is `crash` and the recorded failure is one, else 0.
  int crashSignal() const noexcept { return crashSignal_; }
  // The recorded exception's type when the target is `crash` and the recorded failure is one
  // ("" else), and whether its traceback passes through torch.utils.data (it was raised while a
  // DataLoader loaded a batch: replay serves batches, so that batch is the crash point).
  const std::string& crashException() const noexcept { return crashException_; }
  bool crashWhileLoading() const noexcept { return crashWhileLoading_; }

  // Entropy: the next recorded bytes when the request matches the recording.
  bool serveEntropy(schema::Entropy::Source src, void* buf, size_t n, size_t& got);

  // Batches, encoded for the hook (docs/replay.md, "batch encoding"). Null when not recorded.
  const std::vector<uint8_t>* batch(uint32_t loader, uint64_t index);
  // Bounded traces (docs/replay.md, "Bounded traces"). How a batch was recorded: 0 not at all,
  // 1 by value, 2 by reference with its bytes in the trace (the window), 3 by reference without.
  int batchKind(uint32_t loader, uint64_t index);
  // A stand-in for a fast-forwarded step's batch whose bytes are not in the trace: the recorded
  // structure, zeros for the tensors' bytes (fast-forward computes nothing from them).
  const std::vector<uint8_t>* batchStandIn(uint32_t loader, uint64_t index);
  // A batch the job's own pipeline re-made, digested as the recorder did (session/BatchDigest):
  // remadeBegin, the dlrr_val_* calls (fed to remadeDigest() on this thread), remadeEnd.
  void remadeBegin(uint32_t loader, uint64_t index);
  BatchDigest* remadeDigest();
  // 1 the same as recorded, 0 different (`what` says how; `samplePos` the first sample that
  // differs, -1 unknown), -1 nothing to compare (not recorded by reference).
  int remadeEnd(std::string& what, int64_t& samplePos);
  // What the trace replays with and without the dataset.
  BatchMap batchMap();
  // Jump replay (DLRR_JUMP_STEP, set by dlreplay from its ReplayPlan): steps before it are
  // fast-forwarded and not verified; -1 when replaying from the start.
  int64_t jumpStep() const { return jumpStep_; }
  // dlreplay --what-if (DLRR_WHAT_IF_FROM): from this step the job runs with a change, so its
  // steps are neither verified nor counted (tools/dlreplay/WhatIf.h); INT64_MAX without one.
  int64_t whatIfStep() const { return whatIfStep_; }
  // The recorded snapshot of `step`, encoded like a batch. Null when there is none.
  const std::vector<uint8_t>* snapshot(int64_t step);
  bool batchMeta(uint32_t loader, uint64_t index, int64_t& step, bool& training, const std::vector<int64_t>*& indices);
  int64_t iteratorLength(uint32_t loader, uint32_t iteration) const;
  const std::vector<uint8_t>* rngAtBatch(uint32_t loader, uint64_t index, int kind, int device);
  const std::vector<uint8_t>* rngAtStep(int64_t step, int kind, int device);
  // The states a forked trainer inherited, taken as it began its stream (RngState.atFork).
  const std::vector<uint8_t>* rngAtFork(int kind, int device);
  const char* runtimeInfo(const std::string& key) const;
  int64_t recordedSteps() const { return recordedSteps_; }
  // The last step the recording began (-1: none): a replayed step after it is past the trace.
  int64_t lastStepBegun() const { return lastStepBegun_; }
  double recordedLoss(int64_t step) const;

  // Verification. Returns 0 match, 1 differs (first divergence kept), 2 not in the recording.
  int checkDigest(int64_t step, int kind, const std::string& path, uint32_t callIndex, uint32_t output,
                  const DigestResult& got);
  void beginStep(int64_t step);
  int64_t currentStep() const noexcept override { return step_.load(); }
  // Returns 0 when the step matched everywhere, 1 otherwise.
  int endStep(int64_t step, double loss);

  // ---- The hook's calls that recording makes too (ProcessSession): here they check.
  // beginStep(step); the rest of the step's description is the recording's.
  void stepBegin(int64_t step, uint32_t loader, uint64_t batchIndex, int64_t epoch, StepRule rule) override;
  // endStep, then the report so far (from the jump step on): a crash later still leaves it.
  void stepEnd(int64_t step, double loss) override;
  // Computes the digest into `out` and checks it at the current step (checkDigest); `keep`
  // is recording's.
  int digest(int kind, const char* path, uint32_t callIndex, uint32_t output, const char* dtype, int ndim,
             const int64_t* shape, const void* data, uint64_t nbytes, bool keep, DigestResult& out) override;
  // The exception and where it was raised, as facts of the report.
  void failureException(const char* type, const char* message, const char* where, int n, const char* const* files,
                        const int32_t* lines, const char* const* functions, const char* const* code) override;
  const std::optional<Divergence>& divergence() const { return divergence_; }
  // A divergence the hook found from values it computed (a recorded non-finite value computed
  // finite here, a step past the end of the trace): kept when it is the first.
  void diverge(int64_t step, int kind, const std::string& path, const std::string& detail);

  // The capture level of the recording (what digests exist to be checked).
  int captureLevel() const noexcept override { return captureLevel_; }
  // Full tensors the recording kept for `step` (failure ring), encoded as a dict
  // "kind:path#call.output" -> tensor (BatchEncoding); empty dict when none.
  const std::vector<uint8_t>& recordedTensors(int64_t step);
  // The recorded digests of `step`, in (kind, path, call, output) order.
  struct StepDigest {
    int kind = 0;      // schema TensorDigest.Kind
    std::string path;  // "" for the root module
    uint32_t callIndex = 0;
    uint32_t output = 0;
    RecordedDigest digest;
  };
  std::vector<StepDigest> recordedDigests(int64_t step) const;

  // GPU (ReplaySessionGpu.cc). A digest computed on the device (algorithm 1, deviceSum):
  // compared like checkDigest, but only with a recorded digest of the same algorithm.
  int checkDigestValues(int64_t step, int kind, const std::string& path, uint32_t callIndex, uint32_t output,
                        int algorithm, const DigestResult& got);
  // ProcessSession's: checkDigestValues at the current step.
  int digestValues(int kind, const char* path, uint32_t callIndex, uint32_t output, const char* dtype, int ndim,
                   const int64_t* shape, int algorithm, const DigestResult& d) override;
  void setStepObserver(StepObserver* o) noexcept { observer_.store(o, std::memory_order_release); }
  // Whether this replay captures kernel launches ("" = on; else why not).
  void gpuCaptureOff(const std::string& why);
  void gpuCaptureOn();
  // Launches the replayed process made in `step` (the GPU replayer's drain); appended.
  void addReplayedLaunches(int64_t step, std::vector<KernelLaunch> launches);
  std::vector<KernelLaunch> recordedLaunches(int64_t step) const;
  // The launch comparison of `step` so far (tests, reports).
  LaunchComparison compareStepLaunches(int64_t step, bool complete) const;
  // Compares the current step's launches so far now, as at a stop, and not again for this step:
  // the replay is about to launch kernels of its own that the recording cannot have (anomaly
  // mode's checks in backward), from threads it cannot pause. `why` ends the report's sentence.
  void checkLaunchesNow(const std::string& why);

  // ---- torch.distributed (ReplaySessionDist.cc, docs/distributed.md). The hook reports each
  // collective as in record; here it is numbered the same way and checked against the
  // recording: the op, what this rank sends (inputs) and, when peers really communicate
  // (--all-ranks), what it receives. Replaying one rank alone, results are served instead.
  uint64_t beginCollective(const std::string& op);
  // 0 matches, 1 differs (first divergence kept), 2 not in the recording.
  int checkCollectiveTensor(uint64_t seq, bool result, const std::string& dtype, const std::vector<int64_t>& shape,
                            const DigestResult& got);
  // ProcessSession's: beginCollective(op) (the rest is the recording's), and the tensor's
  // digest checked with checkCollectiveTensor.
  uint64_t collectiveBegin(const char* op, const char* group, const char* reduceOp, int peer, int bucket,
                           bool asyncOp) override;
  int collectiveTensor(uint64_t seq, bool result, const char* dtype, int ndim, const int64_t* shape, const void* data,
                       uint64_t nbytes) override;
  // The recorded bytes of result `index` of collective `seq`: 1 (into out), 0 the recording
  // kept only its digest, -1 no such collective or result.
  int collectiveResult(uint64_t seq, uint32_t index, std::vector<uint8_t>& out);
  int recordedRank() const;  // rank of the replayed stream (-1: not a rank)

  // One of the hook's facts for the report (addHookFact's keys; "warning" adds a warning).
  void fact(const std::string& key, const std::string& value);
  // Writes the report file now (at a stop, and again at exit with the final figures).
  void writeReport(const std::string& stopReason);

 private:
  // batch() and batchStandIn(): the batch encoded once (cached), blobs read through `blob`.
  const std::vector<uint8_t>* encodedBatch(uint32_t loader, uint64_t index, const BlobLoader& blob);
  using DigestKey = std::tuple<int64_t, int, std::string, uint32_t, uint32_t>;
  using BatchKey = std::pair<uint32_t, uint64_t>;
  struct RngRecord {
    int kind;
    int device;
    Hash128 hash;
    uint64_t size;
    std::vector<uint8_t> bytes;  // loaded on first use
  };
  struct BatchRecord {
    std::unique_ptr<capnp::MallocMessageBuilder> event;  // deep copy of the Batch event
    int64_t step = -1;
    bool training = false;
    std::vector<int64_t> sampleIndices;
    std::vector<uint8_t> encoded;  // filled on first use
    int64_t eventStep = -1;        // the step the Batch event was stamped with
    bool byReference = false;
    int bytes = -1;  // by reference: its bytes are in the trace (1), not (0), not checked yet (-1)
    std::vector<RngRecord> rng;
  };
  struct EntropyRecord {
    int source;
    size_t requested;
    std::vector<uint8_t> data;
  };

  void load();
  void loadCollective(schema::Event::Reader e);  // ReplaySessionDist.cc
  void collectiveDivergenceLocked(uint64_t seq, int64_t step, const std::string& what);
  void writeDistReport(ReplayReport& r);
  void loadGpuEvent(schema::Event::Reader e);  // InternedString, CudaLaunch
  void resolveKernelNames();
  void checkLaunchesLocked(int64_t step, bool complete, const std::string& until = "before the stop");
  void writeGpuReport(ReplayReport& r);
  int incomparableLocked(int recordedAlgorithm, int algorithm);
  int checkDigestAlgorithm(int64_t step, int kind, const std::string& path, uint32_t callIndex, uint32_t output,
                           int algorithm, const DigestResult& got);
  const std::vector<uint8_t>* rngBytes(std::vector<RngRecord>& list, int kind, int device);

  Config cfg_;
  ReplayTarget target_;
  int crashSignal_ = 0;
  std::string crashException_;
  bool crashWhileLoading_ = false;
  std::unique_ptr<Trace> trace_;
  StreamReader* stream_ = nullptr;
  bool active_ = false;
  bool loaded_ = false;
  std::string identity_;  // DLRR_PROCESS_ID of this process ("" for the job's main process)
  mutable std::mutex mu_;

  std::vector<EntropyRecord> entropy_;
  size_t entropyNext_ = 0;
  std::map<BatchKey, BatchRecord> batches_;
  std::map<int64_t, BatchRecord> snapshots_;  // by step; a periodic one wins over the failure one
  int64_t jumpStep_ = -1;
  int64_t whatIfStep_ = INT64_MAX;
  std::map<std::pair<uint32_t, uint32_t>, int64_t> iteratorLengths_;
  std::map<int64_t, std::vector<RngRecord>> stepRng_;
  std::vector<RngRecord> forkRng_;  // RngState.atFork
  std::map<DigestKey, RecordedDigest> digests_;
  std::map<int64_t, uint32_t> digestsPerStep_;
  std::map<int64_t, uint32_t> seenPerStep_;
  std::map<int64_t, double> losses_;
  std::map<std::string, std::string> runtime_;
  int64_t recordedSteps_ = 0;
  int64_t lastStepBegun_ = -1;

  std::optional<Divergence> divergence_;
  int64_t verifiedSteps_ = 0;
  int64_t lastStepEnded_ = -1;
  int64_t inStepNumber_ = INT64_MIN;
  std::atomic<int64_t> step_{-1};
  ReplayReport facts_;        // the hook's (fact()), but its warnings: those join warnings_
  std::string reportSuffix_;  // --all-ranks: each rank writes DLRR_REPORT.rank<R>
  std::string finalStop_;     // the first real stop reason sticks (later "exit" does not undo it)
  int captureLevel_ = 1;
  struct KeptTensor {
    std::string key;
    std::unique_ptr<capnp::MallocMessageBuilder> msg;  // a copy of the FullTensor event
  };
  std::map<int64_t, std::vector<KeptTensor>> kept_;
  std::map<int64_t, std::vector<uint8_t>> keptEncoded_;
  std::vector<std::string> warnings_;

  // torch.distributed (ReplaySessionDist.cc).
  struct RecordedCollectiveTensor {
    std::string dtype;
    std::vector<int64_t> shape;
    uint64_t hash = 0, nanCount = 0, infCount = 0;
    Hash128 blob{};
    uint64_t blobSize = 0;  // 0: bytes not kept
  };
  struct RecordedCollective {
    std::string op, group, reduceOp, status;
    int peer = -1, bucket = -1;
    int64_t step = -1;
    std::vector<RecordedCollectiveTensor> inputs, results;
  };
  std::map<uint64_t, RecordedCollective> collectives_;
  std::map<uint64_t, std::pair<uint32_t, uint32_t>> collectiveSeen_;  // inputs, results checked so far
  uint64_t nextCollective_ = 0;
  bool collectivesResynced_ = false;  // numbering set to the jump step's first recorded collective
  // What a collective of a fast-forwarded step is numbered: no recorded collective has it.
  static constexpr uint64_t kFastForwardedCollective = ~uint64_t{0};
  uint64_t collectivesIssued_ = 0, collectiveTensorsVerified_ = 0, collectiveResultsServed_ = 0;

  // GPU (ReplaySessionGpu.cc).
  std::atomic<StepObserver*> observer_{nullptr};
  std::map<uint32_t, std::string> kernelNames_;
  std::map<int64_t, std::vector<KernelLaunch>> recordedLaunches_;
  std::map<int64_t, std::vector<KernelLaunch>> replayedLaunches_;
  std::set<int64_t> launchesChecked_;
  int64_t launchStepsChecked_ = 0;
  int64_t launchStepsMatched_ = 0;
  std::optional<LaunchComparison> launchDivergence_;
  int64_t launchDivergenceStep_ = -1;
  std::string launchAtStop_;
  bool gpuCaptureKnown_ = false;
  std::string gpuCaptureOff_;
  uint64_t incomparableDigests_ = 0;
};

}  // namespace dlrr
