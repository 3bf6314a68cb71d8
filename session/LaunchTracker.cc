#include "session/LaunchTracker.h"

#include <cxxabi.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "format/Hash.h"

namespace dlrr::gpu {

// 64 bytes: one cache line per record.
struct LaunchTracker::Record {
  uint32_t epoch = 0;
  uint32_t seq = 0;
  uint64_t stream = 0;
  struct LaunchPart {
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t sharedMem;
    uint32_t nameId;
  };
  struct CopyPart {
    uint64_t bytes;
    uint64_t digest;
    uint64_t unused[2];
  };
  union {
    LaunchPart l;
    CopyPart m;
  } u{};
  uint32_t device = kUnknownDevice;
  uint32_t correlationId = 0;
  uint8_t op = 0;
  uint8_t direction = 0;
  uint8_t flags = 0;
  uint8_t geometry = 0;
  uint32_t unused = 0;
};
static_assert(sizeof(LaunchTracker::Record) == 64, "one cache line per record");

namespace {

std::atomic<uint64_t> gGenerations{0};

// Per-thread cache of kernel-name ids, keyed by the function pointer (and the name pointer,
// so a handle reused by a reloaded module is interned afresh). Lookups only on the fast path.
class NameCache {
 public:
  bool find(const void* key, const char* name, uint32_t& id) const noexcept {
    if (slots_.empty()) return false;
    size_t i = slot(key);
    for (;;) {
      const Slot& s = slots_[i];
      if (s.key == key) {
        if (s.name != name) return false;
        id = s.id;
        return true;
      }
      if (!s.key) return false;
      i = (i + 1) & mask_;
    }
  }
  void insert(const void* key, const char* name, uint32_t id) {
    if ((used_ + 1) * 2 > slots_.size()) grow();
    size_t i = slot(key);
    while (slots_[i].key && slots_[i].key != key) i = (i + 1) & mask_;
    if (!slots_[i].key) ++used_;
    slots_[i] = {key, name, id};
  }

 private:
  struct Slot {
    const void* key = nullptr;
    const char* name = nullptr;
    uint32_t id = 0;
  };
  size_t slot(const void* key) const noexcept {
    uint64_t k = reinterpret_cast<uintptr_t>(key);
    return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 32) & mask_;
  }
  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{});
    mask_ = slots_.size() - 1;
    used_ = 0;
    for (const Slot& s : old)
      if (s.key) insert(s.key, s.name, s.id);
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t used_ = 0;
};

// Counters written by their owner thread only: a plain load + store, no locked instruction.
inline void bump(std::atomic<uint64_t>& a, uint64_t by = 1) noexcept {
  a.store(a.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

const char kUnknownName[] = "<unknown>";

}  // namespace

struct LaunchTracker::ThreadState {
  // Producer side (the owning thread).
  alignas(64) std::atomic<uint64_t> head{0};
  uint64_t cachedTail = 0;
  int launchDepth = 0;
  int copyDepth = 0;
  int paused = 0;
  bool launchInStep = false;
  bool copyInStep = false;
  Record openLaunch;
  Record openCopy;
  NameCache names;
  // Pages (number + 1) this thread's copies recently proved readable: a probe is a syscall,
  // and jobs copy from the same pinned buffers step after step.
  uintptr_t readablePages[16] = {};
  std::atomic<uint64_t> droppedLaunches{0};
  std::atomic<uint64_t> droppedCopies{0};
  std::atomic<uint32_t> dropEpoch{0};
  std::atomic<uint64_t> outside{0};
  std::atomic<uint64_t> nested{0};
  std::atomic<uint64_t> ignored{0};
  std::atomic<uint64_t> pushedLaunches{0};
  std::atomic<uint64_t> pushedCopies{0};
  // Consumer side (drains, under drainMu_).
  alignas(64) std::atomic<uint64_t> tail{0};
  uint64_t seenDroppedLaunches = 0;
  uint64_t seenDroppedCopies = 0;
  // The ring.
  std::unique_ptr<Record[]> slots;
  size_t capacity = 0;
  size_t mask = 0;
  std::atomic<bool> retired{false};
};

namespace {

struct TlsSlot {
  uint64_t generation;
  LaunchTracker::ThreadState* state;
};
// Initial-exec: the library is preloaded, so its TLS is in the static block and the fast path
// reads it with one %fs-relative load (no __tls_get_addr).
__attribute__((tls_model("initial-exec"))) thread_local TlsSlot tSlot{0, nullptr};

// Marks this thread's states retired when it exits, so a later thread can reuse the ring.
struct ExitGuard {
  std::vector<std::weak_ptr<LaunchTracker::ThreadState>> owned;
  ~ExitGuard() {
    for (auto& w : owned)
      if (auto s = w.lock()) s->retired.store(true, std::memory_order_release);
  }
};
thread_local ExitGuard tExitGuard;

}  // namespace

LaunchTracker::LaunchTracker() : LaunchTracker(Options{}) {}

LaunchTracker::LaunchTracker(Options opts) : opts_(opts), generation_(gGenerations.fetch_add(1) + 1) {
  size_t cap = 1;
  while (cap < std::max<size_t>(opts_.ringCapacity, 2)) cap <<= 1;
  opts_.ringCapacity = cap;
  if (!opts_.probe) opts_.probe = &LaunchTracker::probeReadable;
}

LaunchTracker::~LaunchTracker() {
  // A thread that still caches our state must not use it: the generation of a new tracker
  // never matches, and this one's states die with it.
  if (tSlot.generation == generation_) tSlot = {0, nullptr};
}

bool LaunchTracker::probeReadable(const void* p, uint64_t n) noexcept {
  if (!p || n == 0) return false;
  static std::atomic<int> unavailable{0};
  if (unavailable.load(std::memory_order_relaxed)) return true;  // trust the API's contract
  char sink[2];
  iovec local[2] = {{sink, 1}, {sink + 1, 1}};
  iovec remote[2] = {{const_cast<void*>(p), 1}, {const_cast<char*>(static_cast<const char*>(p)) + (n - 1), 1}};
  ssize_t r = ::process_vm_readv(::getpid(), local, 2, remote, 2, 0);
  if (r == 2) return true;
  if (r < 0 && (errno == ENOSYS || errno == EPERM)) {
    unavailable.store(1, std::memory_order_relaxed);
    return true;
  }
  return false;
}

LaunchTracker::ThreadState* LaunchTracker::threadState() noexcept {
  if (tSlot.generation == generation_) [[likely]]
    return tSlot.state;
  return registerThread();
}

LaunchTracker::ThreadState* LaunchTracker::registerThread() noexcept {
  try {
    std::shared_ptr<ThreadState> st;
    {
      std::lock_guard<std::mutex> lk(registryMu_);
      for (auto& s : threads_) {
        // A retired thread's ring, once drained, serves a new thread.
        if (s->retired.load(std::memory_order_acquire) &&
            s->tail.load(std::memory_order_acquire) == s->head.load(std::memory_order_acquire)) {
          s->retired.store(false, std::memory_order_relaxed);
          s->launchDepth = s->copyDepth = s->paused = 0;
          st = s;
          break;
        }
      }
      if (!st) {
        if (threads_.size() >= opts_.maxThreads) {
          refusedThreads_.fetch_add(1, std::memory_order_relaxed);
          return nullptr;
        }
        st = std::make_shared<ThreadState>();
        st->capacity = opts_.ringCapacity;
        st->mask = st->capacity - 1;
        st->slots.reset(new Record[st->capacity]);
        threads_.push_back(st);
      }
    }
    tExitGuard.owned.push_back(st);
    tSlot = {generation_, st.get()};
    return st.get();
  } catch (...) {
    return nullptr;  // out of memory: this thread's records are lost, the job goes on
  }
}

uint32_t LaunchTracker::internSlow(ThreadState& ts, const void* key, const char* name) noexcept {
  try {
    std::string text = name && *name ? std::string(name) : std::string(kUnknownName);
    uint32_t id;
    {
      std::lock_guard<std::mutex> lk(internMu_);
      auto [it, inserted] = nameIds_.emplace(text, static_cast<uint32_t>(nameIds_.size()));
      id = it->second;
      if (inserted) {
        pendingNames_.emplace_back(id, std::move(text));
        nameCount_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    ts.names.insert(key, name, id);
    return id;
  } catch (...) {
    return 0;
  }
}

void LaunchTracker::push(ThreadState& ts, const Record& r) noexcept {
  uint64_t h = ts.head.load(std::memory_order_relaxed);
  if (h - ts.cachedTail >= ts.capacity) {
    ts.cachedTail = ts.tail.load(std::memory_order_acquire);
    if (h - ts.cachedTail >= ts.capacity) {
      bump(r.op == static_cast<uint8_t>(ApiOp::Launch) ? ts.droppedLaunches : ts.droppedCopies);
      ts.dropEpoch.store(r.epoch, std::memory_order_relaxed);
      return;
    }
  }
  ts.slots[h & ts.mask] = r;
  ts.head.store(h + 1, std::memory_order_release);
  bump(r.op == static_cast<uint8_t>(ApiOp::Launch) ? ts.pushedLaunches : ts.pushedCopies);
}

void LaunchTracker::onApi(const ApiCall& c) noexcept {
  if (!enabled_.load(std::memory_order_relaxed)) [[unlikely]]
    return;
  ThreadState* ts = threadState();
  if (!ts) [[unlikely]]
    return;
  if (ts->paused) [[unlikely]] {
    bump(ts->ignored);
    return;
  }
  if (c.op == ApiOp::Launch)
    onLaunch(*ts, c);
  else
    onMemcpy(*ts, c);
}

void LaunchTracker::onLaunch(ThreadState& ts, const ApiCall& c) noexcept {
  Record& r = ts.openLaunch;
  if (c.site == Site::Enter) {
    if (ts.launchDepth++ > 0) {
      // Nested (the driver launch under a runtime launch): fill in what the outer lacked.
      bump(ts.nested);
      if (!ts.launchInStep) return;
      if (static_cast<uint8_t>(c.geometry) > r.geometry) {
        r.u.l.grid[0] = c.grid.x, r.u.l.grid[1] = c.grid.y, r.u.l.grid[2] = c.grid.z;
        r.u.l.block[0] = c.block.x, r.u.l.block[1] = c.block.y, r.u.l.block[2] = c.block.z;
        r.u.l.sharedMem = c.sharedMem;
        if (r.geometry == static_cast<uint8_t>(Geometry::None)) r.stream = c.stream;
        r.geometry = static_cast<uint8_t>(c.geometry);
        r.flags =
            static_cast<uint8_t>((r.flags & ~(kFlagGeomMirrored | kFlagGeomExact)) |
                                 (c.geometry == Geometry::Exact ? kFlagGeomExact : kFlagGeomMirrored) | kFlagEnriched);
      }
      if (r.device == kUnknownDevice && c.device != kUnknownDevice) {
        r.device = c.device;
        r.flags |= kFlagEnriched;
      }
      return;
    }
    uint64_t v = launchCounter_.fetch_add(1, std::memory_order_relaxed);
    uint32_t epoch = static_cast<uint32_t>(v >> 32);
    ts.launchInStep = (epoch & 1) != 0;
    if (!ts.launchInStep) {
      bump(ts.outside);
      return;
    }
    r.epoch = epoch;
    r.seq = static_cast<uint32_t>(v);
    r.op = static_cast<uint8_t>(ApiOp::Launch);
    r.stream = c.stream;
    r.u.l.grid[0] = c.grid.x, r.u.l.grid[1] = c.grid.y, r.u.l.grid[2] = c.grid.z;
    r.u.l.block[0] = c.block.x, r.u.l.block[1] = c.block.y, r.u.l.block[2] = c.block.z;
    r.u.l.sharedMem = c.sharedMem;
    const void* key = c.function ? c.function : static_cast<const void*>(c.name ? c.name : kUnknownName);
    uint32_t id;
    if (!ts.names.find(key, c.name, id)) [[unlikely]]
      id = internSlow(ts, key, c.name);
    r.u.l.nameId = id;
    r.device = c.device;
    r.correlationId = c.correlationId;
    r.direction = 0;
    r.geometry = static_cast<uint8_t>(c.geometry);
    r.flags = c.geometry == Geometry::Exact ? kFlagGeomExact : c.geometry == Geometry::Mirrored ? kFlagGeomMirrored : 0;
    return;
  }
  if (ts.launchDepth == 0) return;  // an exit whose enter we did not see
  if (--ts.launchDepth > 0 || !ts.launchInStep) return;
  if (c.result != 0) r.flags |= kFlagFailed;
  push(ts, r);
}

void LaunchTracker::onMemcpy(ThreadState& ts, const ApiCall& c) noexcept {
  Record& r = ts.openCopy;
  auto digest = [&](const ApiCall& src) {
    if (!opts_.digestHostToDevice || src.direction != CopyDirection::HostToDevice || !src.hostSrc || !src.bytes) return;
    auto first = reinterpret_cast<uintptr_t>(src.hostSrc) >> 12;
    auto last = (reinterpret_cast<uintptr_t>(src.hostSrc) + src.bytes - 1) >> 12;
    bool known = ts.readablePages[first & 15] == first + 1 && ts.readablePages[last & 15] == last + 1;
    if (known || opts_.probe(src.hostSrc, src.bytes)) {
      ts.readablePages[first & 15] = first + 1;
      ts.readablePages[last & 15] = last + 1;
      r.u.m.digest = hash64(src.hostSrc, src.bytes);
      r.flags = static_cast<uint8_t>((r.flags | kFlagDigest) & ~kFlagUnreadable);
    } else {
      r.flags |= kFlagUnreadable;
    }
  };
  if (c.site == Site::Enter) {
    if (ts.copyDepth++ > 0) {
      bump(ts.nested);
      if (!ts.copyInStep) return;
      if (r.direction == static_cast<uint8_t>(CopyDirection::Other) && c.direction != CopyDirection::Other) {
        r.direction = static_cast<uint8_t>(c.direction);
        r.flags |= kFlagEnriched;
      }
      if (!r.u.m.bytes && c.bytes) r.u.m.bytes = c.bytes;
      if (r.device == kUnknownDevice && c.device != kUnknownDevice) {
        r.device = c.device;
        r.flags |= kFlagEnriched;
      }
      if (!(r.flags & kFlagDigest)) digest(c);
      return;
    }
    uint64_t v = copyCounter_.fetch_add(1, std::memory_order_relaxed);
    uint32_t epoch = static_cast<uint32_t>(v >> 32);
    ts.copyInStep = (epoch & 1) != 0;
    if (!ts.copyInStep) {
      bump(ts.outside);
      return;
    }
    r.epoch = epoch;
    r.seq = static_cast<uint32_t>(v);
    r.op = static_cast<uint8_t>(ApiOp::Memcpy);
    r.stream = c.stream;
    r.u.m = {};
    r.u.m.bytes = c.bytes;
    r.device = c.device;
    r.correlationId = c.correlationId;
    r.direction = static_cast<uint8_t>(c.direction);
    r.geometry = 0;
    r.flags = 0;
    digest(c);
    return;
  }
  if (ts.copyDepth == 0) return;
  if (--ts.copyDepth > 0 || !ts.copyInStep) return;
  if (c.result != 0) r.flags |= kFlagFailed;
  push(ts, r);
}

void LaunchTracker::pauseThread(bool pause) noexcept {
  ThreadState* ts = threadState();
  if (!ts) return;
  if (pause)
    ++ts->paused;
  else if (ts->paused > 0)
    --ts->paused;
}

void LaunchTracker::beginStep(int64_t step) noexcept {
  std::lock_guard<std::mutex> lk(stepMu_);
  uint32_t e = epoch_.load(std::memory_order_relaxed) + 1;
  if ((e & 1) == 0) ++e;
  try {
    epochs_[e] = step;
    while (epochs_.size() > 4096) epochs_.erase(epochs_.begin());
  } catch (...) {  // best effort: out of memory: the epoch maps to no step, its launches count as outside steps
  }
  lastStep_ = step;
  epoch_.store(e, std::memory_order_relaxed);
  launchCounter_.store(static_cast<uint64_t>(e) << 32, std::memory_order_release);
  copyCounter_.store(static_cast<uint64_t>(e) << 32, std::memory_order_release);
}

void LaunchTracker::endStep(int64_t) noexcept {
  std::lock_guard<std::mutex> lk(stepMu_);
  uint32_t e = epoch_.load(std::memory_order_relaxed) + 1;
  if (e & 1) ++e;
  epoch_.store(e, std::memory_order_relaxed);
  launchCounter_.store(static_cast<uint64_t>(e) << 32, std::memory_order_release);
  copyCounter_.store(static_cast<uint64_t>(e) << 32, std::memory_order_release);
}

int64_t LaunchTracker::stepOfEpoch(uint32_t epoch) const {
  auto it = epochs_.find(epoch);
  return it == epochs_.end() ? -1 : it->second;
}

size_t LaunchTracker::drain(LaunchSink& sink) {
  std::lock_guard<std::mutex> dlk(drainMu_);
  std::vector<std::shared_ptr<ThreadState>> threads;
  {
    std::lock_guard<std::mutex> lk(registryMu_);
    threads = threads_;
  }
  scratch_.clear();
  struct Drops {
    uint64_t launches = 0, copies = 0;
  };
  std::map<uint32_t, Drops> drops;
  for (auto& ts : threads) {
    uint64_t t = ts->tail.load(std::memory_order_relaxed);
    uint64_t h = ts->head.load(std::memory_order_acquire);
    for (; t < h; ++t) scratch_.push_back(ts->slots[t & ts->mask]);
    ts->tail.store(h, std::memory_order_release);
    uint64_t dl = ts->droppedLaunches.load(std::memory_order_relaxed);
    uint64_t dc = ts->droppedCopies.load(std::memory_order_relaxed);
    if (dl != ts->seenDroppedLaunches || dc != ts->seenDroppedCopies) {
      Drops& d = drops[ts->dropEpoch.load(std::memory_order_relaxed)];
      d.launches += dl - ts->seenDroppedLaunches;
      d.copies += dc - ts->seenDroppedCopies;
      ts->seenDroppedLaunches = dl;
      ts->seenDroppedCopies = dc;
    }
  }
  // Names after records: a record is published only after its name was queued, so every name
  // a collected record uses is queued by now (or was delivered earlier).
  std::vector<std::pair<uint32_t, std::string>> names;
  {
    std::lock_guard<std::mutex> lk(internMu_);
    names.swap(pendingNames_);
  }
  for (auto& [id, text] : names) sink.name(id, text);
  std::sort(scratch_.begin(), scratch_.end(), [](const Record& a, const Record& b) {
    if (a.epoch != b.epoch) return a.epoch < b.epoch;
    if (a.op != b.op) return a.op < b.op;
    return a.seq < b.seq;
  });
  std::unique_lock<std::mutex> slk(stepMu_);
  uint32_t lastEpoch = UINT32_MAX;
  int64_t step = -1;
  for (const Record& r : scratch_) {
    if (r.epoch != lastEpoch) {
      lastEpoch = r.epoch;
      step = stepOfEpoch(r.epoch);
    }
    if (r.op == static_cast<uint8_t>(ApiOp::Launch)) {
      LaunchEvent e;
      e.step = step;
      e.seq = r.seq;
      e.nameId = r.u.l.nameId;
      e.grid = {r.u.l.grid[0], r.u.l.grid[1], r.u.l.grid[2]};
      e.block = {r.u.l.block[0], r.u.l.block[1], r.u.l.block[2]};
      e.sharedMem = r.u.l.sharedMem;
      e.stream = r.stream;
      e.device = r.device;
      e.correlationId = r.correlationId;
      e.flags = r.flags;
      slk.unlock();
      sink.launch(e);
      slk.lock();
    } else {
      MemcpyEvent e;
      e.step = step;
      e.seq = r.seq;
      e.direction = static_cast<CopyDirection>(r.direction);
      e.bytes = r.u.m.bytes;
      e.digest = (r.flags & kFlagDigest) ? r.u.m.digest : 0;
      e.stream = r.stream;
      e.device = r.device;
      e.correlationId = r.correlationId;
      e.flags = r.flags;
      slk.unlock();
      sink.memcpy(e);
      slk.lock();
    }
  }
  std::vector<std::pair<int64_t, Drops>> dropSteps;
  dropSteps.reserve(drops.size());
  for (auto& [epoch, d] : drops) dropSteps.emplace_back(stepOfEpoch(epoch), d);
  slk.unlock();
  for (auto& [s, d] : dropSteps) sink.dropped(s, d.launches, d.copies);
  size_t n = scratch_.size();
  if (scratch_.capacity() > (size_t{1} << 20)) std::vector<Record>().swap(scratch_);
  return n;
}

LaunchTracker::Stats LaunchTracker::stats() const {
  Stats s;
  std::lock_guard<std::mutex> lk(registryMu_);
  for (auto& ts : threads_) {
    s.launches += ts->pushedLaunches.load(std::memory_order_relaxed);
    s.copies += ts->pushedCopies.load(std::memory_order_relaxed);
    s.droppedLaunches += ts->droppedLaunches.load(std::memory_order_relaxed);
    s.droppedCopies += ts->droppedCopies.load(std::memory_order_relaxed);
    s.outsideSteps += ts->outside.load(std::memory_order_relaxed);
    s.nested += ts->nested.load(std::memory_order_relaxed);
    s.paused += ts->ignored.load(std::memory_order_relaxed);
  }
  s.threads = threads_.size();
  s.names = nameCount_.load(std::memory_order_relaxed);
  return s;
}

std::string displayKernelName(std::string_view mangled, size_t max) {
  std::string name(mangled);
  int status = -1;
  char* d = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  if (d && status == 0) name = d;
  std::free(d);
  if (name.size() > max && max > 3) name = name.substr(0, max - 3) + "...";
  return name;
}

}  // namespace dlrr::gpu
