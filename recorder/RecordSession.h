#pragma once
// One per recorded process: owns the process's stream writer and everything recorded into
// it. The interposer (libc hooks, signal handlers, the C API for the Python hook) forwards
// here. Nothing in this class may throw into the job: public methods swallow and report.
#include <signal.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "format/StreamWriter.h"
#include "recorder/BatchBuilder.h"
#include "recorder/BatchWindow.h"
#include "recorder/CrashRecorder.h"
#include "recorder/FailureRing.h"
#include "recorder/TraceBudget.h"
#include "recorder/TriageLog.h"
#include "schema/dlrr.capnp.h"
#include "session/Config.h"
#include "session/ProcessSession.h"
#include "session/StepObserver.h"
#include "session/TensorDigest.h"

namespace dlrr {

class RecordSession final : public ProcessSession {
 public:
  explicit RecordSession(Config cfg);
  ~RecordSession() override;
  RecordSession(const RecordSession&) = delete;
  RecordSession& operator=(const RecordSession&) = delete;

  const Config& config() const { return cfg_; }
  Mode mode() const noexcept override { return Mode::Record; }
  bool active() const noexcept override { return !disabled_.load(std::memory_order_relaxed); }
  int captureLevel() const noexcept override { return static_cast<int>(cfg_.capture); }
  std::string status() const;
  // Path for faulthandler's dump; created private (0600) on first use, exclusively and
  // relative to the trace directory's fd (never through a planted link); "" when it cannot be.
  const std::string& pystackPath();
  int pystackFd();  // the pystack file's descriptor (made on first use), -1 when there is none

  void entropy(schema::Entropy::Source src, unsigned flags, const void* data, size_t n, size_t requested);
  void runtimeInfo(const char* key, const char* value);
  void note(const char* text);
  void recorderStatus(bool ok, const char* message);

  using StepRule = dlrr::StepRule;
  void stepBegin(int64_t step, uint32_t loader, uint64_t batchIndex, int64_t epoch,
                 StepRule rule = StepRule::Batch) override;
  // The open step ran no backward() and no optimizer.step(): its StepEnd says so.
  void stepUntrained(int64_t step);
  void stepEnd(int64_t step, double loss) override { stepEnd(step, loss, true); }
  // `durableNow` false: the step's frame is written while the caller goes on (a batch
  // delivery's RNG states and batch); the next batchEnd() or waitStepDurable() waits for it,
  // before the job's code runs again.
  void stepEnd(int64_t step, double loss, bool durableNow);
  void waitStepDurable() noexcept;
  int64_t currentStep() const noexcept override { return step_.load(std::memory_order_relaxed); }
  // atFork: the states a forked trainer inherited, taken as it began its stream (RngState.atFork).
  // `wake`: false leaves the writer thread asleep until wakeWriter() (several states at once).
  void rngState(int kind, int device, const void* data, uint64_t n, bool atFork = false, bool wake = true);
  void wakeWriter();

  BatchBuilder& batchBuilder();  // per thread
  void batchBegin(uint32_t loader, uint32_t iteration, uint64_t index, bool isTraining, const int64_t* indices,
                  uint64_t n);
  void batchTensor(const char* dtype, uint32_t elemSize, int ndim, const int64_t* shape, const void* data,
                   uint64_t nbytes, const char* device, bool requiresGrad);
  void batchEnd();  // ends a snapshot too
  void snapshotBegin(int64_t step, bool failure, bool window = false);
  // Bounded traces (docs/recording.md, "Batches by reference"): the batch begun on this thread
  // is recorded by reference: its digest goes into the event, its bytes into the window (when
  // recording with one, until the window is written), else into the stream.
  void batchByReference();
  // Writes the window's held snapshots and batch bytes into the stream and makes them durable;
  // later by-reference batches then write their bytes at once. `why`: for the summary line.
  void flushWindow(const char* why) noexcept;
  bool windowActive() const noexcept { return window_ && !windowFlushed_.load(); }
  void loaderEnd(uint32_t loader, uint32_t iteration, uint64_t batches);

  // Computes and records a digest; returns 0 (recorded) or -1.
  int digest(int kind, const char* path, uint32_t callIndex, uint32_t output, const char* dtype, int ndim,
             const int64_t* shape, const void* data, uint64_t nbytes, bool keep, DigestResult& out) override;
  int digestBorrowed(int kind, const char* path, uint32_t callIndex, uint32_t output, const char* dtype, int ndim,
                     const int64_t* shape, const void* data, uint64_t nbytes, DigestResult& out, int64_t& borrowedStep,
                     int64_t& floor) override;
  bool firstFailureStep(int64_t& step) const;
  void failureException(const char* type, const char* message, const char* where, int n, const char* const* files,
                        const int32_t* lines, const char* const* functions, const char* const* code) override;

  void beforeFork() noexcept;
  void afterForkParent() noexcept;
  void forked(int childPid) noexcept;  // in the parent, after fork() returned
  void afterForkChild() noexcept;

  // ---- triage facts (docs/triage.md). Failed lookups and library loads are aggregated and
  // written, with the resource peaks, at step commits, failures and exit.
  // A failed file-system call of the job; `path` relative to `dirfd` (AT_FDCWD: the cwd).
  void failedLookup(int dirfd, const char* path, int error, LookupOp op) noexcept;
  void libraryLoadError(const char* name, const char* error) noexcept;
  void gpuMemory(int device, uint64_t maxAllocated, uint64_t maxReserved, uint64_t total);
  void packages(const char* reason, int n, const char* const* names, const char* const* versions,
                const char* const* paths);
  const TriageLog& triageLog() const { return triage_; }
  // GPU capture (recorder/GpuRecorder, interpose/cupti): follows step boundaries; set once.
  void setStepObserver(StepObserver* o) noexcept { observer_.store(o, std::memory_order_release); }
  // Appends one event stamped with `step` (fill may put blobs). Swallows errors.
  void appendEvent(int64_t step, const std::function<void(schema::Event::Builder, StreamWriter&)>& fill);
  // A digest computed elsewhere (on the device: algorithm 1 = TensorDigest.Algorithm.deviceSum),
  // recorded like digest() records its own. Returns 0 or -1. (RecordSessionGpu.cc)
  int digestValues(int kind, const char* path, uint32_t callIndex, uint32_t output, const char* dtype, int ndim,
                   const int64_t* shape, int algorithm, const DigestResult& d) override;
  // Bytes for the failure ring only, no digest (device tensors copied to the host when their
  // step fails). (RecordSessionGpu.cc)
  void keepTensor(int kind, const char* path, uint32_t callIndex, uint32_t output, const char* dtype, int ndim,
                  const int64_t* shape, const void* data, uint64_t nbytes);

  // ---- torch.distributed (RecordSessionDist.cc, docs/distributed.md). A collective this rank
  // issued: collectiveBegin numbers it (issue order), collectiveTensor adds an input (before
  // the call) or a result (once the work completed, possibly on another thread), and
  // collectiveEnd writes one Collective event. Results' bytes go into the trace when the
  // recording keeps collective results (--collectives full), else into the failure ring.
  uint64_t collectiveBegin(const char* op, const char* group, const char* reduceOp, int peer, int bucket,
                           bool asyncOp) override;
  // Returns 0 (recorded, or nothing to record).
  int collectiveTensor(uint64_t seq, bool result, const char* dtype, int ndim, const int64_t* shape, const void* data,
                       uint64_t nbytes) override;
  void collectiveEnd(uint64_t seq, const char* status);
  // Where this rank waits (docs/distributed.md, hangs): one CollectiveWait event, committed
  // before returning so that it survives the rank being killed right after.
  struct CollectiveWaitRec {
    int reason = 0;  // schema::CollectiveWait::Reason
    bool waiting = false;
    uint64_t seq = 0;
    const char* op = "";
    const char* group = "";
    int64_t issuedStep = -1;
    int64_t completedSeq = -1;
    const char* completedOp = "";
    int64_t completedStep = -1;
    uint64_t waitedMs = 0;
    const char* stacks = "";
  };
  void collectiveWait(const CollectiveWaitRec& w);

  // Async-signal-safe: records a fatal signal with native and Python stacks. ips[faultFrame]
  // is where the fault happened (the failure's `where`): the frame after the last signal
  // frame, as the frames before it are signal handling (a handler that re-raised, raise()).
  void onFatalSignal(int sig, const siginfo_t* info, const uint64_t* ips, int nips, int faultFrame = 0) noexcept;
  // Records the process's exit and closes the stream. Idempotent.
  void onExit(bool exited, int code) noexcept;

 private:
  StreamWriter* writer();
  template <typename Fill>
  void emit(Fill&& fill, int64_t stepBegin = -1);
  void reportStatus(const std::string& line) noexcept;
  void reportWriterFailure(StreamWriter& w) noexcept;
  int traceDirFd();  // caller holds mu_; throws TraceError
  // Digest collectives with a window (--window K): a result's bytes kept with the window's
  // segment of `step`, or written now for the failing step once the window was; false: neither.
  bool keepCollectiveInWindow(int64_t step, const std::string& dtype, const void* data, uint64_t nbytes, BlobId& blob);
  // Keeps a tensor in the failure ring, or writes it at once when its step already failed.
  void keepInRing(int64_t step, int kind, const char* path, uint32_t callIndex, uint32_t output, std::string_view dtype,
                  const int64_t* shape, int ndim, const void* data, uint64_t nbytes);
  // A tensor of the failing step kept after the failure (the ring's Keep::WriteNow): written now.
  void writeFailingStepTensor(int64_t step, int kind, const char* path, uint32_t callIndex, uint32_t output,
                              std::string_view dtype, const int64_t* shape, int ndim, const void* data,
                              uint64_t nbytes);
  // The Digest event of a computed digest, then the failure rule.
  void recordDigest(int64_t step, int kind, const char* path, uint32_t callIndex, uint32_t output, const char* dtype,
                    int ndim, const int64_t* shape, const DigestResult& d);
  // The failure rule (the first non-finite digest of the process), shared by host and device
  // digests: writes the Failure event, then the failure ring, failing step first.
  void recordNonFinite(int64_t step, int kind, const char* path, uint32_t callIndex, const DigestResult& d,
                       bool flushObserver);
  void commitNow();  // the writer's commit(true), when there is a writer
  // Appends the triage facts that changed (reason: step | failure | exit); full = resource
  // limits and /proc figures too. Takes no lock of ours: callable with mu_ held.
  void writeTriage(StreamWriter& w, const char* reason, bool full);

  Config cfg_;
  pid_t ownerPid_ = -1;  // a vfork()ed child shares our memory but has another pid: it must not touch it
  // DLRR_PROCESS_ID when this process started recording (multiprocessing.Process identity,
  // "" for the job's main process). A forked child whose environment holds another one is a
  // Process the job started or an os.fork() child (a Hogwild trainer; processes.py names
  // both): it records its own stream. A fork that keeps ours (native code's fork) or that is
  // a DataLoader worker's records nothing; the parent's Fork event says which it was.
  std::string identity_;
  // Lock order (fork's prepare handler, beforeFork, takes them all in it): a FileLog's mutex
  // (interpose/FileServe, before calling in here), mu_, ring_'s, triage_'s, collMu_, gpuMu_, then
  // the writer's own. ring_, triage_, collMu_ and gpuMu_ are leaves: nothing else is taken while
  // one of them is held. The fork protocol (interpose/Interposer.cc's pthread_atfork handlers):
  // prepare = FileLog::lockForFork, beforeFork; parent = afterForkParent, FileLog's unlock;
  // child = afterForkChild (releases them, resets the ring's), FileLog's unlock. GpuRecorder's
  // lock is not taken: GPU capture stays in the parent, and the child never reaches it
  // (observer_ is cleared). RecordSessionForkTest forks under a thread that holds them.
  mutable std::mutex mu_;
  std::unique_ptr<StreamWriter> writer_;
  // writer_ once opened, cleared in a fork child: what every caller that only uses the writer
  // reads, without mu_ (which guards opening it; the writer is never destroyed before the
  // session, so the lock never protected more than this read).
  std::atomic<StreamWriter*> openWriter_{nullptr};
  StreamWriter* openWriter() const noexcept { return openWriter_.load(std::memory_order_acquire); }
  bool openTried_ = false;
  std::string status_;
  UniqueFd dirFd_;     // the trace directory, opened once (O_NOFOLLOW, owner checked)
  int streamFd_ = -1;  // the writer's fd (protected from the job's close, see OwnFds.h)
  std::string pystackPath_;
  std::string pystackName_;
  int pystackFd_ = -1;  // read back (pread) by the signal path; never closed
  bool pystackReady_ = false;
  std::atomic<bool> writerFailureReported_{false};
  std::atomic<bool> disabled_{false};
  std::atomic<bool> exited_{false};
  std::atomic<int64_t> step_{-1};
  std::atomic<uint64_t> pendingCommit_{0};  // the writer's ticket of a step end not yet waited for
  int64_t startNs_ = 0;

  // Per-step figures for StepEnd.
  std::atomic<uint64_t> stepNonFinite_{0};
  std::atomic<bool> stepUntrained_{false};
  std::atomic<uint32_t> stepDigests_{0};
  std::atomic<bool> haveFailure_{false};
  std::atomic<int64_t> failureStep_{-1};

  // Full tensors of the last ringSteps steps, written out only when a failure happens.
  // dlrecord --budget (recorder/TraceBudget.h): a periodic snapshot is written into a bulk file
  // of its own (bulkWriter_, open while it is recorded, on the thread taking it), which the
  // budget may drop later; the stream's own growth is checked every budgetStride_ bytes.
  std::unique_ptr<TraceBudget> budget_;  // set with the writer, when cfg_.budget > 0
  std::string streamName_;
  std::mutex bulkMu_;  // a leaf: bulkWriter_ and its name
  std::unique_ptr<StreamWriter> bulkWriter_;
  std::string bulkName_;
  uint64_t bulkNext_ = 1;
  bool bulkMarked_ = false;  // the stream's header says kFormatMajor (it uses bulk files)
  std::mutex budgetMu_;      // budget_'s drops and checks
  uint64_t budgetCheckedAt_ = 0;
  std::atomic<bool> budgetStopped_{false};
  void openBulk() noexcept;
  // Closes the bulk file of the snapshot just recorded: true when it is whole (its event may be
  // written), false when it was removed (the snapshot is then not written).
  bool closeBulk(int64_t step, bool keep) noexcept;
  // Drops old bulk files so that the trace plus `extra` fits; when even what is kept exceeds
  // the budget, recording stops (the job goes on). Returns the trace's bytes after.
  uint64_t enforceBudget(uint64_t extra, const char* where) noexcept;
  void maybeCheckBudget() noexcept;

  std::unique_ptr<BatchWindow> window_;  // cfg_.window > 0: batches by reference
  std::mutex windowMu_;                  // the window (batches, held snapshots, its flush)
  std::atomic<bool> windowFlushed_{false};
  FailureRing ring_;

  // Triage facts.
  TriageLog triage_;
  std::mutex gpuMu_;
  struct GpuPeak {
    int device;
    uint64_t maxAllocated, maxReserved, total;
  };
  std::vector<GpuPeak> gpus_;
  std::atomic<uint64_t> rssWritten_{0};
  std::atomic<StepObserver*> observer_{nullptr};

  // Collectives begun and not yet ended, by seq.
  struct CollectiveTensorRec {
    std::string dtype;
    std::vector<int64_t> shape;
    DigestResult digest;
    BlobId blob;  // size 0: bytes not kept
  };
  struct PendingCollective {
    std::string op, group, reduceOp;
    int peer = -1;
    int bucket = -1;
    bool asyncOp = false;
    int64_t step = -1;
    std::vector<CollectiveTensorRec> inputs, results;
  };
  std::mutex collMu_;
  std::map<uint64_t, PendingCollective> collectives_;
  uint64_t nextCollective_ = 0;
  static constexpr size_t kMaxPendingCollectives = 4096;  // async works never waited on

  CrashRecorder crash_;  // the fatal-signal path, with its preallocated memory
};

}  // namespace dlrr
