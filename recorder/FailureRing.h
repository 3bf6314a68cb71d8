#pragma once
// The failure ring: full tensors of the last K steps, kept in memory and written to the trace
// only when the process fails (docs/recording.md). Copying every module output of every step
// is the ring's whole cost, so entries of evicted steps are reused for the next step's copies.
//
// At the failure the ring hands its tensors over failing step first (then the older steps,
// newest first): a job killed while they are being written (`timeout`, a scheduler's SIGTERM)
// loses the oldest step, not the one the user asks about. Tensors of the failing step kept
// after the failure are not buffered: the caller writes them at once (Keep::WriteNow).
//
// A borrowed entry (keepBorrowed) holds no copy: the caller (the Python hook's extension)
// keeps the tensor alive while the ring may read it, i.e. for every step >= borrowFloor(),
// and the entry holds its address, size and the hash digested at hook time. At the failure the
// bytes are read and digested again into the ring's own buffer; an entry whose bytes no longer
// hash to the hook's (changed in place after their hook) is dropped and counted, never written.
// Thread-safe; nothing here touches the trace.
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace dlrr {

// An allocator whose resize() leaves new bytes uninitialised: a recycled buffer is resized to
// the next tensor, which the digest's pass then writes whole; zero-filling it first would be
// one more pass over the memory.
template <typename T>
struct UninitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitAllocator<U>;
  };
  UninitAllocator() noexcept = default;
  template <typename U>
  UninitAllocator(const UninitAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;  // default-initialised: no zeroing
  }
  template <typename U, typename... A>
  void construct(U* p, A&&... a) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
};
using KeptBytes = std::vector<uint8_t, UninitAllocator<uint8_t>>;

struct KeptTensor {
  int kind = 0;  // schema TensorDigest.Kind
  std::string path;
  uint32_t callIndex = 0;
  uint32_t output = 0;
  std::string dtype;
  std::vector<int64_t> shape;
  KeptBytes bytes;
  int64_t step = -1;
  // Borrowed (bytes empty until the failure): the caller's memory and its hash at hook time.
  const void* borrowed = nullptr;
  uint64_t borrowedBytes = 0;
  uint64_t hookHash = 0;
};

// What takeForFailure hands over: the tensors, each with its bytes, and how many borrowed ones
// were left out because their bytes no longer hashed as at their hook.
struct RingForFailure {
  std::vector<KeptTensor> tensors;
  uint32_t changedAfterHook = 0;
};

class FailureRing {
 public:
  static constexpr size_t kDefaultCapBytes = 512u << 20;

  // `steps` <= 0: the ring is off (keep() drops everything).
  explicit FailureRing(int steps, size_t capBytes = kDefaultCapBytes) : steps_(steps), capBytes_(capBytes) {}

  enum class Keep {
    Kept,     // copied into the ring
    Dropped,  // ring off, over its byte cap, or a step other than the failing one after the failure
    WriteNow  // a tensor of the failing step after the failure: the caller writes it now
  };
  // What happens to a tensor of `step`; copies it when the answer is Kept.
  Keep keep(int64_t step, int kind, std::string_view path, uint32_t callIndex, uint32_t output, std::string_view dtype,
            const int64_t* shape, int ndim, const void* data, uint64_t nbytes);
  // keep() with the copy left to the caller: when the answer is Kept, and only then,
  // `fill(uint8_t* dst)` is called under the ring's lock and must write the nbytes to dst
  // (the digest's own pass over the tensor copies it: computeDigestAndCopy).
  template <typename Fill>
  Keep keepFilled(int64_t step, int kind, std::string_view path, uint32_t callIndex, uint32_t output,
                  std::string_view dtype, const int64_t* shape, int ndim, uint64_t nbytes, Fill&& fill) {
    if (steps_ <= 0) return Keep::Dropped;
    std::lock_guard<std::mutex> lk(mu_);
    Keep verdict = Keep::Dropped;
    KeptTensor* k = reserveLocked(step, kind, path, callIndex, output, dtype, shape, ndim, nbytes, verdict, false);
    if (k) fill(k->bytes.data());
    return verdict;
  }

  // keep() without a copy: when the answer is Kept the ring holds `data` (nbytes, whose digest
  // hash was `hash`) and reads it at a failure, so the caller must keep it unchanged in memory
  // while its step is >= borrowFloor(). Dropped for a step already evicted (< borrowFloor()).
  Keep keepBorrowed(int64_t step, int kind, std::string_view path, uint32_t callIndex, uint32_t output,
                    std::string_view dtype, const int64_t* shape, int ndim, const void* data, uint64_t nbytes,
                    uint64_t hash);
  // The lowest step whose borrowed entries the ring may still read: it only grows (eviction),
  // and is INT64_MAX once the failure took the ring (nothing is borrowed after it).
  int64_t borrowFloor() const;

  // A step begins: evicts the oldest steps so that at most steps-1 remain besides it.
  void stepBegan();

  // The failure at `failingStep`: everything kept, failing step first, then the older steps
  // newest first (each step's tensors in the order kept), borrowed ones read and checked
  // against their hook's hash under the ring's lock (so none is evicted meanwhile). Once
  // only: later calls return nothing.
  RingForFailure takeForFailure(int64_t failingStep);
  // How many tensors of `step` the ring holds now (the failure event says how many follow it).
  size_t countForStep(int64_t step) const;

  bool failed() const;
  size_t bytes() const;

  // Fork protocol: the session locks the ring with its own lock before fork(); the child
  // drops everything (a forked child records nothing).
  void lockForFork() noexcept { mu_.lock(); }
  void unlockAfterForkParent() noexcept { mu_.unlock(); }
  void resetAfterForkChild() noexcept;

 private:
  // The verdict for a tensor of `step`; when Kept, its entry, described and sized to nbytes
  // (the caller fills the bytes under the same lock); null otherwise.
  KeptTensor* reserveLocked(int64_t step, int kind, std::string_view path, uint32_t callIndex, uint32_t output,
                            std::string_view dtype, const int64_t* shape, int ndim, uint64_t nbytes, Keep& verdict,
                            bool borrow);
  KeptTensor spareLocked(size_t n);       // a recycled entry whose buffer fits, or a fresh one
  void recycleLocked(KeptTensor&& kept);  // frees when the spares are full

  const int steps_;
  const size_t capBytes_;
  mutable std::mutex mu_;
  std::map<int64_t, std::vector<KeptTensor>> ring_;
  decltype(ring_)::iterator current_ = ring_.end();  // the last keep's step (a node stays put until erased)
  size_t ringBytes_ = 0;
  bool failed_ = false;
  int64_t failingStep_ = -1;
  size_t writtenAfterFailure_ = 0;  // bytes handed out as WriteNow (bounded by the cap too)
  int64_t floor_ = INT64_MIN;       // borrowFloor(): one past the last evicted step
  // Entries of evicted steps, whole (buffer, path, dtype and shape keep their capacity), in
  // the order they were kept: the next step keeps the same tensors in the same order, so the
  // front is usually an exact fit, and a keep allocates nothing.
  std::deque<KeptTensor> spare_;
  size_t spareBytes_ = 0;
  static constexpr size_t kMaxSpare = 256;
};

}  // namespace dlrr
