#pragma once
// GPU kernel launches and memory copies, from API callbacks to per-step records.
//
// Pure logic: no CUDA or CUPTI types. The CUPTI layer (interpose/cupti) decodes each callback
// into an ApiCall and hands it to onApi() on the thread that made the CUDA call; tests and the
// micro-benchmark feed synthetic ApiCalls the same way. A consumer (the recorder's drain thread,
// or the replayer at a step end) calls drain() to receive the records in order.
//
// The callback path (onApi) takes no lock and allocates nothing once a thread is warm: it fills
// a 64-byte record in a per-thread single-producer ring and publishes it with one release
// store. A full ring drops the record and counts it; it never blocks the CUDA call.
//
// De-duplication rule (docs/gpu.md): a runtime launch (cudaLaunchKernel, __cudaLaunchKernel,
// ...) calls a driver launch (cuLaunchKernel[Ex]) on the same thread, and CUPTI reports both,
// each with its own correlation id. Per thread and per operation (launch / copy) we count the
// nesting depth of the APIs we subscribe to; only the outermost API makes a record. A nested
// call only fills in what the outer one could not know (grid/block of __cudaLaunchKernel,
// which has no parameter struct in the headers; the device when the runtime had no context
// yet; the direction and host source of a cudaMemcpyDefault copy). A launch made straight
// through the driver (Triton, CUDA graphs' helpers, cuBLAS builds that bypass cudart) is then
// its own outermost call and is recorded once too.
//
// Sequence numbers: every record takes its number within the step from one atomic counter per
// operation (launches, copies). The counter packs (epoch << 32 | n): beginStep/endStep start a
// new epoch, so a single fetch_add yields both the step a record belongs to and its number in
// it, consistently, whichever thread launches. Launches made outside steps (model set-up,
// evaluation without a step) are counted, not recorded.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dlrr::gpu {

enum class ApiOp : uint8_t { Launch = 0, Memcpy = 1 };
// Same values as CUPTI_CB_DOMAIN_DRIVER_API / _RUNTIME_API.
enum class ApiDomain : uint8_t { Driver = 1, Runtime = 2 };
enum class Site : uint8_t { Enter = 0, Exit = 1 };
// Same numbering as schema CudaMemcpy.Direction.
enum class CopyDirection : uint8_t { HostToDevice = 0, DeviceToHost = 1, DeviceToDevice = 2, Other = 3 };
// How grid/block of a launch are known: not at all, from a parameter layout we mirror
// (__cudaLaunchKernel), or from the documented parameter struct.
enum class Geometry : uint8_t { None = 0, Mirrored = 1, Exact = 2 };

struct Dim3 {
  uint32_t x = 0, y = 0, z = 0;
  friend bool operator==(const Dim3&, const Dim3&) = default;
};

inline constexpr uint32_t kUnknownDevice = 0xFFFFFFFFu;

// One API callback, decoded. Pointers are valid for the duration of onApi() only.
struct ApiCall {
  ApiOp op = ApiOp::Launch;
  ApiDomain domain = ApiDomain::Runtime;
  Site site = Site::Enter;
  uint32_t cbid = 0;
  uint32_t correlationId = 0;
  int32_t result = 0;  // exit site: the API's return code (0 = success)
  // Launches.
  const void* function = nullptr;  // interning key: host stub, cudaKernel_t or CUfunction
  const char* name = nullptr;      // kernel name (mangled), may be null
  Dim3 grid, block;
  uint32_t sharedMem = 0;
  Geometry geometry = Geometry::None;
  // Copies.
  CopyDirection direction = CopyDirection::Other;
  const void* hostSrc = nullptr;  // host->device: the host source, digested at the enter site
  uint64_t bytes = 0;
  // Both.
  uint64_t stream = 0;
  uint32_t device = kUnknownDevice;
};

// Flags of a record.
enum RecordFlags : uint8_t {
  kFlagFailed = 1,        // the API returned an error (the launch / copy did not happen)
  kFlagEnriched = 2,      // a nested call filled something in
  kFlagGeomMirrored = 4,  // grid/block from the mirrored __cudaLaunchKernel layout
  kFlagGeomExact = 8,     // grid/block from a documented parameter struct
  kFlagDigest = 16,       // memcpy: digest holds the XXH3-64 of the host source
  kFlagUnreadable = 32,   // memcpy: the host source could not be read (no digest)
};

struct LaunchEvent {
  int64_t step = -1;
  uint32_t seq = 0;  // number within the step, from 0
  uint32_t nameId = 0;
  Dim3 grid, block;
  uint32_t sharedMem = 0;
  uint64_t stream = 0;
  uint32_t device = kUnknownDevice;
  uint32_t correlationId = 0;
  uint8_t flags = 0;
};

struct MemcpyEvent {
  int64_t step = -1;
  uint32_t seq = 0;
  CopyDirection direction = CopyDirection::Other;
  uint64_t bytes = 0;
  uint64_t digest = 0;  // XXH3-64 of host->device payloads, 0 otherwise
  uint64_t stream = 0;
  uint32_t device = kUnknownDevice;
  uint32_t correlationId = 0;
  uint8_t flags = 0;
};

// Receives drained records, in order: names first (each id once, before its first use), then
// per step launches by seq and copies by seq.
class LaunchSink {
 public:
  virtual ~LaunchSink() = default;
  virtual void name(uint32_t id, std::string_view text) = 0;
  virtual void launch(const LaunchEvent& e) = 0;
  virtual void memcpy(const MemcpyEvent& e) = 0;
  // Records lost because a thread's ring was full (counted since the last drain).
  virtual void dropped(int64_t step, uint64_t launches, uint64_t copies) { (void)step, (void)launches, (void)copies; }
};

class LaunchTracker {
 public:
  // Whether [p, p+n) can be read (probes the first and last byte without faulting).
  using HostProbe = bool (*)(const void* p, uint64_t n);
  static bool probeReadable(const void* p, uint64_t n) noexcept;

  struct Options {
    size_t ringCapacity = size_t{1} << 16;  // records per thread (64 B each), a power of two
    size_t maxThreads = 256;                // threads with a ring; more threads' records drop
    bool digestHostToDevice = true;
    HostProbe probe = &LaunchTracker::probeReadable;
  };

  struct Stats {
    uint64_t launches = 0;  // recorded (in steps)
    uint64_t copies = 0;
    uint64_t droppedLaunches = 0;
    uint64_t droppedCopies = 0;
    uint64_t outsideSteps = 0;  // launches and copies made outside any step (counted only)
    uint64_t nested = 0;        // nested callbacks folded into their outer call
    uint64_t paused = 0;        // callbacks ignored while their thread was paused
    uint64_t threads = 0;
    uint64_t names = 0;
  };

  LaunchTracker();
  explicit LaunchTracker(Options opts);
  ~LaunchTracker();
  LaunchTracker(const LaunchTracker&) = delete;
  LaunchTracker& operator=(const LaunchTracker&) = delete;

  // The callback path. Any thread; never blocks, never throws.
  void onApi(const ApiCall& c) noexcept;

  // The calling thread's launches and copies are not the job's while paused (the hook's own
  // digest kernels): they are ignored, in record and in replay alike. Nests.
  void pauseThread(bool pause) noexcept;

  // Step boundaries (from the recorder's / replayer's step tracking).
  void beginStep(int64_t step) noexcept;
  void endStep(int64_t step) noexcept;

  // Moves every published record to sink. Serialised with other drains; producers go on.
  // Returns the number of launch and copy records delivered.
  size_t drain(LaunchSink& sink);

  // Off for good (a forked child, or capture turned off): onApi returns at once.
  void disable() noexcept { enabled_.store(false, std::memory_order_relaxed); }
  bool enabled() const noexcept { return enabled_.load(std::memory_order_relaxed); }

  Stats stats() const;
  const Options& options() const { return opts_; }

  // The fixed-size record of the rings (exposed for tests and the benchmark).
  struct Record;
  struct ThreadState;

 private:
  ThreadState* threadState() noexcept;
  ThreadState* registerThread() noexcept;
  uint32_t internSlow(ThreadState& ts, const void* key, const char* name) noexcept;
  void push(ThreadState& ts, const Record& r) noexcept;
  void onLaunch(ThreadState& ts, const ApiCall& c) noexcept;
  void onMemcpy(ThreadState& ts, const ApiCall& c) noexcept;
  int64_t stepOfEpoch(uint32_t epoch) const;

  Options opts_;
  const uint64_t generation_;
  std::atomic<bool> enabled_{true};

  // (epoch << 32 | next sequence number); odd epochs are steps.
  alignas(64) std::atomic<uint64_t> launchCounter_{0};
  alignas(64) std::atomic<uint64_t> copyCounter_{0};
  alignas(64) std::atomic<uint32_t> epoch_{0};

  mutable std::mutex stepMu_;  // epochs_ (written by step boundaries, read by drains)
  std::map<uint32_t, int64_t> epochs_;
  int64_t lastStep_ = -1;

  mutable std::mutex registryMu_;  // threads_: registration (once per thread) and drains
  std::vector<std::shared_ptr<ThreadState>> threads_;
  std::atomic<uint64_t> refusedThreads_{0};

  std::mutex internMu_;  // the name table: a thread's first sight of a kernel only
  std::unordered_map<std::string, uint32_t> nameIds_;
  std::vector<std::pair<uint32_t, std::string>> pendingNames_;
  std::atomic<uint64_t> nameCount_{0};

  std::mutex drainMu_;
  std::vector<Record> scratch_;
};

// Device-independent kernel names for reports: demangled when possible, cut to `max` chars.
std::string displayKernelName(std::string_view mangled, size_t max = 160);

}  // namespace dlrr::gpu
