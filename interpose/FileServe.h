#pragma once
// The file layer of data-less replay in the libc hooks (docs/replay.md "Files").
//
// Record (recorder/FileLog): the open, stat and opendir hooks report what succeeded, once the
// Python hook turned file recording on. Replay (replayer/FileRedirect): the same hooks, and
// the write-side ones in FileServe.cc (rename, unlink, rmdir, link, symlink, truncate, chmod,
// utimensat),
// send the job's paths to the served copy where the path is missing, and its writes to the
// scratch directory. Both cost one predictable branch when off.
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <string>

#include "interpose/ErrorBoundary.h"
#include "interpose/ReentryGuard.h"
#include "recorder/FileLog.h"
#include "replayer/FileRedirect.h"

namespace dlrr::files {

FileLog* fileLog() noexcept;        // recording files (else nullptr)
FileRedirect* redirect() noexcept;  // replaying with a scratch directory (else nullptr)
// The same for the write-side hooks: nullptr too when the kernel isolates the job (dlreplay's
// and dlpreflight's sandbox, DLRR_ISOLATION=kernel): its writes then go where the job sends
// them, on the overlay, with the kernel's own path resolution (symlinks, "..", /proc).
FileRedirect* writeRedirect() noexcept;

// An open may change the file: anything but a plain O_RDONLY.
inline bool writes(int flags) noexcept {
  return (flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC | O_APPEND)) ||
         (flags & O_TMPFILE) == O_TMPFILE;
}
int fopenFlags(const char* mode) noexcept;

// A lookup that reads (open O_RDONLY, stat, access, opendir): `call(dirfd, path)` on the path
// replay wants, retried on the served copy when the original is missing. `failed(r)` says
// whether r is a failure (errno set).
// FileRedirect::forRead of a job's path argument: the path to use instead ("" = the original),
// with `abs` and `fallback` (the served copy to retry with) as forRead sets them.
inline std::string readPath(FileRedirect& fr, int dirfd, const char* path, std::string& abs,
                            std::string& fallback) noexcept {
  try {
    abs = fr.resolve(dirfd, path);
    return abs.empty() ? std::string() : fr.forRead(abs, fallback);
  } catch (...) {
    DLRR_SWALLOWED();
    return {};
  }
}

template <typename R, typename Call, typename Failed>
R lookup(int dirfd, const char* path, Call&& call, Failed&& failed) {
  FileRedirect* fr = redirect();
  if (!fr || !path) return call(dirfd, path);
  ReentryGuard g;
  if (!g) return call(dirfd, path);
  std::string abs, fallback;
  const std::string use = readPath(*fr, dirfd, path, abs, fallback);
  if (!use.empty()) return call(AT_FDCWD, use.c_str());
  R r = call(dirfd, path);
  if (failed(r) && (errno == ENOENT || errno == ENOTDIR) && !fallback.empty()) {
    int e = errno;
    R served = call(AT_FDCWD, fallback.c_str());
    if (!failed(served)) {
      try {
        fr->servedUsed(abs);
      } catch (...) {
        DLRR_SWALLOWED();
      }
      return served;
    }
    errno = e;
  }
  return r;
}

// An open with `flags`: writes go to the scratch copy; reads as lookup() above.
template <typename R, typename Call, typename Failed>
R openFile(int dirfd, const char* path, int flags, Call&& call, Failed&& failed, R failure) {
  if (!path || !writes(flags)) return lookup<R>(dirfd, path, call, failed);
  FileRedirect* fr = writeRedirect();
  if (!fr) return call(dirfd, path);
  if ((flags & O_TMPFILE) == O_TMPFILE) return call(dirfd, path);  // unnamed: nothing of the user's changes
  ReentryGuard g;
  if (!g) return call(dirfd, path);
  std::string w;
  int err = 0;
  try {
    std::string abs = fr->resolve(dirfd, path);
    if (abs.empty()) return call(dirfd, path);
    w = fr->forWrite(abs, flags, err);
  } catch (...) {
    DLRR_SWALLOWED();
    err = EIO;
  }
  if (w.empty()) {
    errno = err;
    return failure;
  }
  return call(AT_FDCWD, w.c_str());
}

// Record: what succeeded (no-ops unless file recording is on in this thread).
void noteOpen(int dirfd, const char* path, int flags, int fd) noexcept;
void noteStat(int dirfd, const char* path, const struct stat* st) noexcept;
void noteList(int dirfd, const char* path) noexcept;
// A read of `got` bytes into buf from fd; `end` is the file position after it (-1: ask lseek).
void noteRead(int fd, const void* buf, ssize_t got, int64_t end = -1) noexcept;

}  // namespace dlrr::files
