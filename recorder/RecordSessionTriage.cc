// RecordSession's triage facts (docs/triage.md): failed file-system lookups and library
// loads (aggregated in a TriageLog), resource peaks, GPU memory peaks and imported packages.
// Kept apart from RecordSession.cc: nothing here is on the per-step hot path except one
// getrusage() at each commit.
#include <capnp/message.h>
#include <fcntl.h>
#include <limits.h>
#include <time.h>
#include <unistd.h>

#include <cstring>

#include "recorder/RecordSession.h"
#include "recorder/ResourceUsage.h"

namespace dlrr {
namespace {

int64_t monoNow() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// Set while the recorder itself reads /proc and cgroup files: its own failed lookups are not
// the job's.
thread_local bool tInternal = false;

struct Internal {
  bool prev;
  Internal() noexcept : prev(tInternal) { tInternal = true; }
  ~Internal() { tInternal = prev; }
};

std::string baseDirOf(int dirfd) {
  char buf[PATH_MAX];
  if (dirfd == AT_FDCWD) return ::getcwd(buf, sizeof buf) ? std::string(buf) : std::string();
  std::string link = "/proc/self/fd/" + std::to_string(dirfd);
  ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

bool under(const std::string& path, const std::string& dir) {
  return !dir.empty() && path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/';
}

}  // namespace

void RecordSession::failedLookup(int dirfd, const char* path, int error, LookupOp op) noexcept {
  if (!path || !*path || tInternal || disabled_.load(std::memory_order_relaxed) || exited_.load()) return;
  if (!TriageLog::interesting(error, op)) return;
  Internal guard;  // getcwd/readlink below must not come back here
  try {
    if (::getpid() != ownerPid_) return;  // a vfork child sharing our memory: not the job
    std::string p;
    if (path[0] == '/') {
      p = path;
    } else {
      std::string base = baseDirOf(dirfd);
      p = base.empty() ? std::string(path) : base + (base.back() == '/' ? "" : "/") + path;
    }
    if (under(p, cfg_.traceDir)) return;  // the recorder's own files
    triage_.failedLookup(p, error, op, monoNow() - startNs_, step_.load(std::memory_order_relaxed));
  } catch (...) {  // best effort: triage facts are informational: never into the job's failed lookup
  }
}

void RecordSession::libraryLoadError(const char* name, const char* error) noexcept {
  if (tInternal || disabled_.load(std::memory_order_relaxed) || exited_.load()) return;
  Internal guard;
  try {
    if (::getpid() != ownerPid_) return;
    triage_.failedLibrary(name ? name : "(null)", error ? error : "", monoNow() - startNs_,
                          step_.load(std::memory_order_relaxed));
  } catch (...) {  // best effort: triage facts are informational: never into the job's failed dlopen
  }
}

void RecordSession::gpuMemory(int device, uint64_t maxAllocated, uint64_t maxReserved, uint64_t total) {
  std::lock_guard<std::mutex> lk(gpuMu_);
  for (auto& g : gpus_)
    if (g.device == device) {
      g = {device, maxAllocated, maxReserved, total};
      return;
    }
  if (gpus_.size() < 64) gpus_.push_back({device, maxAllocated, maxReserved, total});
}

void RecordSession::packages(const char* reason, int n, const char* const* names, const char* const* versions,
                             const char* const* paths) {
  if (n < 0) n = 0;
  if (n > 4096) n = 4096;
  if (disabled_.load(std::memory_order_relaxed)) return;
  try {
    StreamWriter* w;
    {
      std::lock_guard<std::mutex> lk(mu_);
      w = writer();
    }
    if (!w) return;
    capnp::MallocMessageBuilder msg;
    auto e = msg.initRoot<schema::Event>();
    e.setTNs(monoNow() - startNs_);
    e.setStep(step_.load(std::memory_order_relaxed));
    auto p = e.initPackages();
    p.setReason(reason ? reason : "");
    auto items = p.initItems(static_cast<unsigned>(n));
    for (int i = 0; i < n; ++i) {
      auto it = items[static_cast<unsigned>(i)];
      it.setName(names && names[i] ? names[i] : "");
      it.setVersion(versions && versions[i] ? versions[i] : "");
      it.setPath(paths && paths[i] ? paths[i] : "");
    }
    w->append(msg);
  } catch (
      ...) {  // best effort: triage facts are informational: the step, the failure, the exit are recorded regardless
  }
}

void RecordSession::writeTriage(StreamWriter& w, const char* reason, bool full) {
  Internal guard;
  try {
    int64_t step = step_.load(std::memory_order_relaxed);
    auto stamp = [&](schema::Event::Builder e) {
      e.setTNs(monoNow() - startNs_);
      e.setStep(step);
      e.setThread(0);
    };
    if (triage_.dirty()) {
      TriageLog::Changes c = triage_.takeChanges();
      if (!c.paths.empty()) {
        capnp::MallocMessageBuilder msg;
        auto e = msg.initRoot<schema::Event>();
        stamp(e);
        auto mp = e.initMissingPaths();
        mp.setDroppedPaths(c.droppedPaths);
        mp.setDroppedFailures(c.droppedFailures);
        auto list = mp.initPaths(static_cast<unsigned>(c.paths.size()));
        for (size_t i = 0; i < c.paths.size(); ++i) {
          auto m = list[static_cast<unsigned>(i)];
          const FailedLookup& f = c.paths[i];
          m.setPath(f.path);
          m.setError(f.error);
          m.setOp(static_cast<schema::MissingPath::Op>(f.op));
          m.setCount(f.count);
          m.setFirstNs(f.firstNs);
          m.setFirstStep(f.firstStep);
        }
        w.append(msg);
      }
      for (const FailedLibrary& l : c.libraries) {
        capnp::MallocMessageBuilder msg;
        auto e = msg.initRoot<schema::Event>();
        stamp(e);
        auto le = e.initLibraryLoadError();
        le.setName(l.name);
        le.setError(l.error);
        le.setCount(l.count);
        le.setFirstNs(l.firstNs);
        le.setFirstStep(l.firstStep);
        w.append(msg);
      }
    }
    ResourceSample r = full ? sampleSelfFull() : sampleSelfQuick();
    uint64_t written = rssWritten_.load(std::memory_order_relaxed);
    // At commits only when the peak grew by an eighth: a handful of events per job.
    if (!full && written && r.maxRssBytes <= written + written / 8) return;
    rssWritten_.store(r.maxRssBytes, std::memory_order_relaxed);
    capnp::MallocMessageBuilder msg;
    auto e = msg.initRoot<schema::Event>();
    stamp(e);
    auto rp = e.initResourcePeak();
    rp.setReason(reason);
    rp.setMaxRssBytes(r.maxRssBytes);
    rp.setVmPeakBytes(r.vmPeakBytes);
    rp.setAddressSpaceLimit(r.addressSpaceLimit);
    rp.setMemoryLimit(r.memoryLimit);
    rp.setMemTotal(r.memTotal);
    rp.setCpuUserNs(r.cpuUserNs);
    rp.setCpuSystemNs(r.cpuSystemNs);
    {
      std::lock_guard<std::mutex> lk(gpuMu_);
      auto gl = rp.initGpus(static_cast<unsigned>(gpus_.size()));
      for (size_t i = 0; i < gpus_.size(); ++i) {
        auto g = gl[static_cast<unsigned>(i)];
        g.setDevice(gpus_[i].device);
        g.setMaxAllocated(gpus_[i].maxAllocated);
        g.setMaxReserved(gpus_[i].maxReserved);
        g.setTotal(gpus_[i].total);
      }
    }
    w.append(msg);
  } catch (...) {
    // best effort: triage facts are best effort: the step, the failure, the exit are recorded regardless.
  }
}

}  // namespace dlrr
