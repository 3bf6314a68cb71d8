#pragma once
// What failure triage needs from a recorded process, beyond the failure itself: the file-system
// lookups that failed (open, stat, access, mkdir, opendir) and the shared libraries that did
// not load. The libc hooks report every failure here; this class keeps one entry per
// (path, op, errno) with a count and the time of the first failure, up to a cap of distinct
// entries, and hands out what changed since the last time so that RecordSession writes one
// compact event at a step commit, a failure or exit instead of one event per failed call.
//
// Thread-safe. Never allocates unboundedly: paths and messages are truncated, entries capped.
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dlrr {

// Same numbering as schema MissingPath.Op.
enum class LookupOp : uint8_t { Open = 0, Create = 1, Stat = 2, Access = 3, Mkdir = 4, Opendir = 5, Other = 6 };

struct FailedLookup {
  std::string path;
  int error = 0;
  LookupOp op = LookupOp::Open;
  uint64_t count = 0;
  int64_t firstNs = 0;
  int64_t firstStep = -1;
};

struct FailedLibrary {
  std::string name;
  std::string error;
  uint64_t count = 0;
  int64_t firstNs = 0;
  int64_t firstStep = -1;
};

class TriageLog {
 public:
  static constexpr size_t kMaxPaths = 256;
  static constexpr size_t kMaxLibraries = 32;
  static constexpr size_t kMaxText = 1024;  // longer paths and messages are truncated

  explicit TriageLog(size_t maxPaths = kMaxPaths, size_t maxLibraries = kMaxLibraries)
      : maxPaths_(maxPaths), maxLibraries_(maxLibraries) {}

  // Whether a failure with this errno says something about the environment (ENOENT, EACCES,
  // EROFS, ENOSPC, ...); EEXIST, EAGAIN, EINTR and the like are normal control flow.
  static bool interesting(int error, LookupOp op) noexcept;
  // Lookups every Python process makes and that say nothing about the job: the import
  // system's probes for compiled package initialisers (pkg/__init__.cpython-*.so) and cached
  // bytecode (__pycache__/*.pyc).
  static bool isImportProbe(std::string_view path) noexcept;

  // Returns true when the failure was counted in a kept entry.
  bool failedLookup(std::string_view path, int error, LookupOp op, int64_t tNs, int64_t step);
  bool failedLibrary(std::string_view name, std::string_view error, int64_t tNs, int64_t step);

  bool dirty() const noexcept { return dirty_.load(std::memory_order_relaxed); }

  struct Changes {
    std::vector<FailedLookup> paths;       // new or counted again since the last call
    std::vector<FailedLibrary> libraries;  // idem
    uint64_t droppedPaths = 0;             // cumulative
    uint64_t droppedFailures = 0;          // cumulative
    bool empty() const { return paths.empty() && libraries.empty(); }
  };
  // What changed since the previous call, with cumulative counts; clears the change marks.
  Changes takeChanges();

  // Everything so far.
  std::vector<FailedLookup> paths() const;
  std::vector<FailedLibrary> libraries() const;
  uint64_t droppedPaths() const;

  // Fork: the child gets a usable (unlocked) log.
  void lockForFork() noexcept { mu_.lock(); }
  void unlockAfterFork() noexcept { mu_.unlock(); }

 private:
  size_t maxPaths_;
  size_t maxLibraries_;
  mutable std::mutex mu_;
  std::atomic<bool> dirty_{false};
  std::unordered_map<std::string, size_t> pathIndex_;  // key: op, errno, path
  std::vector<FailedLookup> paths_;
  std::vector<bool> pathChanged_;
  std::vector<FailedLibrary> libraries_;
  std::vector<bool> libraryChanged_;
  uint64_t droppedPaths_ = 0;
  uint64_t droppedFailures_ = 0;
  std::unordered_map<std::string, bool> droppedKeys_;  // bounded: at most kDroppedKeys
  static constexpr size_t kDroppedKeys = 4096;
};

}  // namespace dlrr
