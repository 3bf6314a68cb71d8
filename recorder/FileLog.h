#pragma once
// What the job's main process learns from its files, recorded for data-less replay
// (docs/replay.md "Files"): the stat of paths it looked at, the listings of directories it
// read, the whole contents of small files it opened for reading, and, of larger files, only
// the byte ranges it used (np.memmap slices, reported by the Python hook; reads with read,
// pread and fread). Each fact is
// written once per path (again when it changed); bytes are content-addressed blobs.
//
// Off until the Python hook turns it on (when the job imports torch): the interpreter's own
// start-up is over by then, and processes that are not Python jobs record nothing. Paused in
// a thread while a DataLoader fetches a batch (replay serves the batch, not its files).
#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dlrr {

class RecordSession;

class FileLog {
 public:
  // Files up to `wholeMax` bytes are recorded whole when opened for reading.
  FileLog(RecordSession& session, uint64_t wholeMax);

  void enable() noexcept { enabled_.store(true, std::memory_order_relaxed); }
  void exclude(const std::string& dir);
  static void pauseThisThread(bool pause) noexcept;
  // Cheap test for the libc hooks: recording on, this thread not paused.
  bool wanted() const noexcept;

  // A read-only open of `path` (relative to dirfd) succeeded with `fd`.
  void opened(int dirfd, const char* path, int fd) noexcept;
  // A stat-like call on `path` succeeded (`follow`: it followed symlinks).
  void statted(int dirfd, const char* path, const struct stat& st) noexcept;
  // opendir(path) succeeded: the listing is read here, separately.
  void listed(int dirfd, const char* path) noexcept;
  // Bytes the job used at `offset` of `path` (already mapped or read by the job).
  void range(const char* path, uint64_t offset, const void* data, uint64_t n) noexcept;
  // Bytes the job read from `fd` (read, pread, fread) ending at file position `end`: kept when
  // fd is a file over the whole-file limit opened earlier (matched by device and inode, so a
  // dup()ed descriptor counts too).
  void readFrom(int fd, const void* data, uint64_t n, int64_t end) noexcept;
  // Cheap test for the read hooks: a file over the limit was opened (reads may need keeping).
  bool largeOpened() const noexcept { return largeOpened_.load(std::memory_order_relaxed); }
  // Fork: taken before the session's locks (a fact is written while mu_ is held), released in
  // both parent and child, so the child never inherits it held by another thread.
  void lockForFork() noexcept { mu_.lock(); }
  void unlockAfterFork() noexcept { mu_.unlock(); }

  uint64_t wholeMax() const noexcept { return wholeMax_; }

 private:
  // Absolute path when it is a path of the job worth recording, else "".
  std::string interesting(int dirfd, const char* path);
  void writeFact(const std::string& abs, const struct stat& st, const std::vector<std::pair<std::string, int>>* entries,
                 uint64_t offset, const void* data, uint64_t n);

  RecordSession& session_;
  const uint64_t wholeMax_;
  std::atomic<bool> enabled_{false};
  std::mutex mu_;
  std::vector<std::string> excluded_;
  struct Seen {
    uint64_t size = 0;
    int64_t mtimeNs = 0;
    uint32_t mode = 0;
    bool whole = false;   // contents recorded
    bool listed = false;  // listing recorded
  };
  std::unordered_map<std::string, Seen> seen_;
  std::set<std::tuple<std::string, uint64_t, uint64_t>> ranges_;
  std::atomic<bool> largeOpened_{false};
  std::map<std::pair<uint64_t, uint64_t>, std::string> large_;  // (dev, inode) -> path
};

}  // namespace dlrr
