#pragma once
// Replay's view of the file system (docs/replay.md "Files"). Every process of a replayed job
// (DLRR_MODE=replay with DLRR_SCRATCH set by dlreplay) sends its path lookups through here:
//
//   SCRATCH/served/ABS   what the recording read of ABS (FileServer built it before the job
//                        started): used where ABS is missing here (or, on request, always
//                        for files whose bytes the trace holds)
//   SCRATCH/written/ABS  what the replayed job wrote to ABS: every write goes here, copied
//                        first from ABS when it changes an existing file; reads then see it
//   SCRATCH/deleted/ABS  a marker: the replayed job removed or renamed ABS (the user's file
//                        stays); lookups of ABS then fail with ENOENT
//   SCRATCH/files.log    one line per path served, written, deleted or renamed (per process)
//
// The user's files are never opened for writing, truncated, renamed or removed. The decisions
// are here; interpose/FileServe.cc calls them from the libc hooks.
#include <sys/types.h>

#include <mutex>
#include <optional>
#include <set>
#include <string>

namespace dlrr {

enum class ServeFiles { Never, Missing, Always };

class FileRedirect {
 public:
  FileRedirect(const std::string& scratch, const std::string& traceDir, ServeFiles serve, bool kernelIsolated = false);
  // DLRR_SCRATCH / DLRR_SERVE_FILES / DLRR_TRACE of a replayed process; none when replay has
  // no scratch directory (or this is not replay).
  struct Settings {
    std::string scratch, traceDir;
    ServeFiles serve = ServeFiles::Missing;
    bool kernelIsolated = false;
  };
  static std::optional<Settings> fromEnvironment();

  // Absolute path of a job's path argument, or "" when it is not redirected (relative to an
  // unknown fd, /proc, /sys, /dev, /run, the scratch or the trace directory).
  std::string resolve(int dirfd, const char* path) const;

  // A lookup (open for reading, stat, access, opendir) of `abs`: the path to use instead,
  // or "" for the original. `fallback` is set to the served path to retry with when the
  // original fails with ENOENT/ENOTDIR ("" when none).
  std::string forRead(const std::string& abs, std::string& fallback);
  // A served path was used for `abs` (for the log).
  void servedUsed(const std::string& abs);

  // An open that may write (O_WRONLY/O_RDWR/O_CREAT/O_TRUNC, fopen "w"/"a"/"+", truncate,
  // chmod, utime): the path under written/ to use; "" and `err` when the call must fail.
  std::string forWrite(const std::string& abs, int flags, int& err);
  // mkdir, unlink/rmdir and rename done on the overlay. Return 0 or -1 with errno set.
  int mkdir(const std::string& abs, mode_t mode);
  int remove(const std::string& abs, bool dir);
  int rename(const std::string& from, const std::string& to);
  // A new name (hard link: a copy; symbolic link: made in written/) for the job only.
  int link(const std::string& from, const std::string& to);
  int symlink(const char* target, const std::string& abs);
  // A Unix socket's path: bound where the job's other writes go when its directory exists
  // only there (multiprocessing's /tmp/pymp-*), found there by connect. "" = the original.
  std::string socketPath(const std::string& abs, bool binding);

  const std::string& scratch() const { return scratch_; }
  // The job runs on the kernel's overlay (DLRR_ISOLATION=kernel, tools/common/Sandbox.h): the
  // write-side hooks leave its writes alone; serving missing paths stays.
  bool kernelIsolated() const { return kernelIsolated_; }

  // fork(): taken by the prepare handler, released in the parent and the child.
  void lockForFork() noexcept { mu_.lock(); }
  void unlockAfterFork() noexcept { mu_.unlock(); }

 private:
  std::string written(const std::string& abs) const { return written_ + abs; }
  std::string served(const std::string& abs) const { return served_ + abs; }
  std::string deleted(const std::string& abs) const { return deleted_ + abs; }
  bool isDeleted(const std::string& abs) const;
  // ABS as the job sees it: 0 missing, else its st_mode (written copy, user's file, served).
  mode_t lookup(const std::string& abs) const;
  bool parentExists(const std::string& abs) const;
  bool makeParents(const std::string& path, const std::string& root) const;
  void whiteout(const std::string& abs);
  void log(const char* what, const std::string& abs, const std::string& extra = "");

  std::string scratch_, served_, written_, deleted_, traceDir_;
  std::string report_, gdbStatus_;  // dlreplay's own files (DLRR_REPORT[.rank<R>], DLRR_GDB_STATUS)
  ServeFiles serve_;
  bool kernelIsolated_ = false;
  bool changed_ = false;  // this process (or one before it) wrote, removed or renamed something
  std::mutex mu_;         // a leaf; held across fork() (lockForFork) so a child never inherits it held
  std::set<std::string> logged_;
};

}  // namespace dlrr
