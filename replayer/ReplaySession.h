#pragma once
// One per replayed process: serves what the recording saw (entropy, batches, RNG states),
// checks what the process recomputes against the recorded digests, and writes the report
// that dlreplay shows. The Python hook drives it through the replay half of dlrr.h.
//
// Composed of: the RecordingIndex (the stream read once: immutable facts, bulk read on
// demand), the ReplayVerifier (the comparisons and the first divergence), and the
// ReplayReportWriter (facts, warnings, the report file). The session itself keeps only the
// cursors of serving (entropy) and the GPU launch comparison.
//
// Locks, always taken in this order (a lock is never taken while holding a later one):
//   1. reportMu_   a report being written: its figures gathered, then the file
//   2. mu_         the session's: entropy cursor, GPU launch state
//   3. the verifier's
//   4. the report writer's
//   5. the index's reader lock (a leaf)
// fork() (interpose/Interposer.cc's pthread_atfork handlers): beforeFork takes all five in
// that order, afterForkParent and afterForkChild release them, so a child never inherits one
// held by a thread it does not have. FileRedirect's lock is taken before them (the two never
// nest).
//
// Bulk answers (batches, snapshots, RNG states, kept tensors) are encoded for each call into
// the caller's buffer: nothing served is kept, so replay memory stays bounded by the index
// (docs/replay.md, "Memory").
#include <atomic>
#include <climits>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "format/BatchMap.h"
#include "format/Trace.h"
#include "replayer/LaunchCompare.h"
#include "replayer/RecordingIndex.h"
#include "replayer/ReplayReportWriter.h"
#include "replayer/ReplayTarget.h"
#include "replayer/ReplayVerifier.h"
#include "schema/dlrr.capnp.h"
#include "session/BatchDigest.h"
#include "session/Config.h"
#include "session/ProcessSession.h"
#include "session/StepObserver.h"
#include "session/TensorDigest.h"

namespace dlrr {

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
  // fork(): see the lock order above.
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

  // Batches, encoded for the hook into `out` (docs/replay.md, "batch encoding"). False when
  // not recorded. Recorded: all its bytes from the trace (a blob missing throws). StandIn: for
  // a fast-forwarded step's batch whose bytes are not in the trace, the recorded structure
  // with zeros for the tensors' bytes (fast-forward computes nothing from them).
  enum class BatchBytes { Recorded, StandIn };
  bool batch(uint32_t loader, uint64_t index, BatchBytes which, std::vector<uint8_t>& out);
  // Bounded traces (docs/replay.md, "Bounded traces"). How a batch was recorded: 0 not at all,
  // 1 by value, 2 by reference with its bytes in the trace (the window), 3 by reference without.
  int batchKind(uint32_t loader, uint64_t index) const;
  // A batch the job's own pipeline re-made, digested as the recorder did (session/BatchDigest):
  // remadeBegin, the dlrr_val_* calls (fed to remadeDigest() on this thread), remadeEnd.
  void remadeBegin(uint32_t loader, uint64_t index);
  BatchDigest* remadeDigest();
  // 1 the same as recorded, 0 different (`what` says how; `samplePos` the first sample that
  // differs, -1 unknown), -1 nothing to compare (not recorded by reference).
  int remadeEnd(std::string& what, int64_t& samplePos);
  // What the trace replays with and without the dataset.
  BatchMap batchMap() const;
  // Jump replay (DLRR_JUMP_STEP, set by dlreplay from its ReplayPlan): steps before it are
  // fast-forwarded and not verified; -1 when replaying from the start.
  int64_t jumpStep() const { return jumpStep_; }
  // dlreplay --what-if (DLRR_WHAT_IF_FROM): from this step the job runs with a change, so its
  // steps are neither verified nor counted (tools/dlreplay/WhatIf.h); INT64_MAX without one.
  int64_t whatIfStep() const { return whatIfStep_; }
  // The recorded snapshot of `step`, encoded like a batch into `out`. False when there is none.
  bool snapshot(int64_t step, std::vector<uint8_t>& out);
  // `indices` stays valid for the session's life (the index holds it).
  bool batchMeta(uint32_t loader, uint64_t index, int64_t& step, bool& training,
                 const std::vector<int64_t>*& indices) const;
  int64_t iteratorLength(uint32_t loader, uint32_t iteration) const;
  // RNG states into `out`: taken as a batch was delivered, as a step began, or inherited by a
  // forked trainer (RngState.atFork). False when none of that kind and device.
  bool rngAtBatch(uint32_t loader, uint64_t index, int kind, int device, std::vector<uint8_t>& out);
  bool rngAtStep(int64_t step, int kind, int device, std::vector<uint8_t>& out);
  bool rngAtFork(int kind, int device, std::vector<uint8_t>& out);
  const char* runtimeInfo(const std::string& key) const;
  int64_t recordedSteps() const { return index_ ? index_->recordedSteps() : 0; }
  // The last step the recording began (-1: none): a replayed step after it is past the trace.
  int64_t lastStepBegun() const { return index_ ? index_->lastStepBegun() : -1; }
  double recordedLoss(int64_t step) const;

  // ---- The hook's calls that recording makes too (ProcessSession): here they check.
  // The step begins (the rest of its description is the recording's).
  void stepBegin(int64_t step, uint32_t loader, uint64_t batchIndex, int64_t epoch,
                 StepRule rule = StepRule::Batch) override;
  int64_t currentStep() const noexcept override { return step_.load(); }
  // Checks the step's loss, digests and launches, then writes the report so far (from the
  // jump step on): a crash later still leaves it.
  void stepEnd(int64_t step, double loss) override;
  // Computes the digest into `out` and checks it at the current step: 0 match, 1 differs (first
  // divergence kept), 2 not in the recording. `keep` is recording's.
  int digest(int kind, const char* path, uint32_t callIndex, uint32_t output, const char* dtype, int ndim,
             const int64_t* shape, const void* data, uint64_t nbytes, bool keep, DigestResult& out) override;
  // A digest computed elsewhere (algorithm 0 on the host, 1 deviceSum on the GPU), checked at
  // the current step like digest(), only against a recorded digest of the same algorithm.
  int digestValues(int kind, const char* path, uint32_t callIndex, uint32_t output, const char* dtype, int ndim,
                   const int64_t* shape, int algorithm, const DigestResult& d) override;
  // The exception and where it was raised, as facts of the report.
  void failureException(const char* type, const char* message, const char* where, int n, const char* const* files,
                        const int32_t* lines, const char* const* functions, const char* const* code) override;
  std::optional<Divergence> divergence() const { return verifier_->divergence(); }
  // A divergence the hook found from values it computed (a recorded non-finite value computed
  // finite here, a step past the end of the trace): kept when it is the first.
  void diverge(int64_t step, int kind, const std::string& path, const std::string& detail);

  // The capture level of the recording (what digests exist to be checked).
  int captureLevel() const noexcept override { return captureLevel_; }
  // Full tensors the recording kept for `step` (failure ring), encoded into `out` as a dict
  // "kind:path#call.output" -> tensor (BatchEncoding); an empty dict when none.
  void recordedTensors(int64_t step, std::vector<uint8_t>& out);
  // The recorded digests of `step`, in (kind, path, call, output) order.
  struct StepDigest {
    int kind = 0;      // schema TensorDigest.Kind
    std::string path;  // "" for the root module
    uint32_t callIndex = 0;
    uint32_t output = 0;
    RecordedDigest digest;
  };
  std::vector<StepDigest> recordedDigests(int64_t step) const;

  // ---- GPU (ReplaySessionGpu.cc).
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
  // The op is checked (the rest of its description is the recording's).
  uint64_t collectiveBegin(const char* op, const char* group, const char* reduceOp, int peer, int bucket,
                           bool asyncOp) override;
  // The tensor's digest checked: 0 matches, 1 differs (first divergence kept), 2 not recorded.
  int collectiveTensor(uint64_t seq, bool result, const char* dtype, int ndim, const int64_t* shape, const void* data,
                       uint64_t nbytes) override;
  // The recorded bytes of result `index` of collective `seq`: 1 (into out), 0 the recording
  // kept only its digest, -1 no such collective or result.
  int collectiveResult(uint64_t seq, uint32_t index, std::vector<uint8_t>& out);
  int recordedRank() const;  // rank of the replayed stream (-1: not a rank)

  // One of the hook's facts for the report (addHookFact's keys; "warning" adds a warning).
  void fact(const std::string& key, const std::string& value) { report_.fact(key, value); }
  // Writes the report file now (at a stop, and again at exit with the final figures).
  void writeReport(const std::string& stopReason);

 private:
  void load();
  bool rngBytes(const std::vector<RecordingIndex::RngRef>* list, int kind, int device, std::vector<uint8_t>& out);
  void checkLaunchesLocked(int64_t step, bool complete, const std::string& until = "before the stop");
  void gpuFigures(ReplayReport& r) const;  // under mu_

  Config cfg_;
  ReplayTarget target_;
  int crashSignal_ = 0;
  std::string crashException_;
  bool crashWhileLoading_ = false;
  std::unique_ptr<Trace> trace_;
  StreamReader* stream_ = nullptr;
  bool active_ = false;
  std::string identity_;  // DLRR_PROCESS_ID of this process ("" for the job's main process)
  int captureLevel_ = 1;
  int64_t jumpStep_ = -1;
  int64_t whatIfStep_ = INT64_MAX;
  std::atomic<int64_t> step_{-1};

  ReplayReportWriter report_;  // before the verifier, which warns through it
  // Set by load() before the session turns active (or in a forked child, alone); null when
  // this process replays nothing.
  std::unique_ptr<RecordingIndex> index_;
  std::unique_ptr<ReplayVerifier> verifier_;
  std::atomic<uint64_t> collectiveResultsServed_{0};

  std::mutex reportMu_;
  mutable std::mutex mu_;
  size_t entropyNext_ = 0;
  // GPU (ReplaySessionGpu.cc).
  std::atomic<StepObserver*> observer_{nullptr};
  std::map<int64_t, std::vector<KernelLaunch>> replayedLaunches_;
  std::set<int64_t> launchesChecked_;
  int64_t launchStepsChecked_ = 0;
  int64_t launchStepsMatched_ = 0;
  std::optional<LaunchComparison> launchDivergence_;
  int64_t launchDivergenceStep_ = -1;
  std::string launchAtStop_;
  bool gpuCaptureKnown_ = false;
  std::string gpuCaptureOff_;
};

}  // namespace dlrr
