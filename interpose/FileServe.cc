// Data-less replay in the libc hooks (see FileServe.h): the process-wide FileLog (record) and
// FileRedirect (replay), the write-side hooks only replay needs, and the C API the Python
// hook uses to turn file recording on, pause it during batch fetches and report the byte
// ranges a job used of its memory-mapped files.
#include "interpose/FileServe.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>
#include <utime.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <new>

#include "dlrr/dlrr.h"
#include "interpose/ActiveSession.h"
#include "interpose/ErrorBoundary.h"
#include "interpose/RealFn.h"

namespace dlrr::files {
namespace {

// Constructed once and never destructed: the job's threads may call hooked functions while
// the process exits (as interpose/ActiveSession.cc).
alignas(FileLog) unsigned char gLogStorage[sizeof(FileLog)];
std::atomic<FileLog*> gLog{nullptr};
alignas(FileRedirect) unsigned char gRedirectStorage[sizeof(FileRedirect)];
std::atomic<FileRedirect*> gRedirect{nullptr};

uint64_t wholeMaxFromEnvironment() noexcept {
  constexpr uint64_t kDefault = 64ull << 20;
  const char* v = std::getenv("DLRR_FILES_WHOLE_MAX");
  if (!v || !*v) return kDefault;
  char* end = nullptr;
  unsigned long long n = std::strtoull(v, &end, 10);
  return end && *end == '\0' && v[0] != '-' ? n : kDefault;
}

// libc declares most path arguments nonnull; a buggy caller may still pass NULL (the real
// function then fails with EFAULT), so the compiler is kept from assuming it is not.
const char* maybeNull(const char* p) noexcept {
  asm("" : "+r"(p));
  return p;
}

__attribute__((constructor)) void startRedirect() {
  ReentryGuard g;  // the constructor's own file calls are not the job's
  try {
    if (auto s = FileRedirect::fromEnvironment()) {
      auto* fr = ::new (static_cast<void*>(gRedirectStorage))
          FileRedirect(s->scratch, s->traceDir, s->serve, s->kernelIsolated);
      gRedirect.store(fr, std::memory_order_release);
    }
  } catch (...) {
    DLRR_SWALLOWED();
  }
}

// A path operation replay performs on its overlay instead of the user's files.
template <typename Op, typename Real>
int overlay(int dirfd, const char* path, Op&& op, Real&& real) {
  FileRedirect* fr = writeRedirect();
  if (!fr || !maybeNull(path)) return real();
  ReentryGuard g;
  if (!g) return real();
  try {
    std::string abs = fr->resolve(dirfd, path);
    if (abs.empty()) return real();
    return op(*fr, abs);
  } catch (...) {
    DLRR_SWALLOWED();
    errno = EIO;
    return -1;
  }
}

// chmod, utimensat, truncate: the change lands on the written copy (made first).
template <typename Real>
int onCopy(int dirfd, const char* path, Real&& real) {
  FileRedirect* fr = writeRedirect();
  if (!fr || !maybeNull(path) || !*path) return real(dirfd, path);
  ReentryGuard g;
  if (!g) return real(dirfd, path);
  std::string w;
  int err = 0;
  try {
    std::string abs = fr->resolve(dirfd, path);
    if (abs.empty()) return real(dirfd, path);
    w = fr->forWrite(abs, O_WRONLY, err);
  } catch (...) {
    DLRR_SWALLOWED();
    err = EIO;
  }
  if (w.empty()) {
    errno = err;
    return -1;
  }
  return real(AT_FDCWD, w.c_str());
}

// bind/connect of a Unix socket with a path: the address rewritten as FileRedirect says.
template <typename Real>
int socketCall(const struct sockaddr* addr, socklen_t len, bool binding, Real&& real) {
  FileRedirect* fr = writeRedirect();
  if (!fr || !addr || addr->sa_family != AF_UNIX || len <= offsetof(sockaddr_un, sun_path)) return real(addr, len);
  const auto* un = reinterpret_cast<const sockaddr_un*>(addr);
  size_t n =
      strnlen(un->sun_path, std::min(sizeof un->sun_path, static_cast<size_t>(len) - offsetof(sockaddr_un, sun_path)));
  if (n == 0 || n >= sizeof un->sun_path) return real(addr, len);  // abstract or unterminated
  ReentryGuard g;
  if (!g) return real(addr, len);
  std::string use;
  try {
    std::string abs = fr->resolve(AT_FDCWD, un->sun_path);
    if (!abs.empty()) use = fr->socketPath(abs, binding);
  } catch (...) {
    DLRR_SWALLOWED();
  }
  if (use.empty() || use.size() >= sizeof un->sun_path) return real(addr, len);
  sockaddr_un other{};
  other.sun_family = AF_UNIX;
  memcpy(other.sun_path, use.c_str(), use.size() + 1);
  return real(reinterpret_cast<const sockaddr*>(&other),
              static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + use.size() + 1));
}

}  // namespace

FileLog* fileLog() noexcept { return gLog.load(std::memory_order_acquire); }
FileRedirect* redirect() noexcept { return gRedirect.load(std::memory_order_acquire); }
FileRedirect* writeRedirect() noexcept {
  FileRedirect* fr = gRedirect.load(std::memory_order_acquire);
  return fr && !fr->kernelIsolated() ? fr : nullptr;
}

int fopenFlags(const char* mode) noexcept {
  if (!mode) return O_RDONLY;
  int flags = strchr(mode, '+') ? O_RDWR : O_RDONLY;
  if (mode[0] == 'w')
    flags = (flags == O_RDWR ? O_RDWR : O_WRONLY) | O_CREAT | O_TRUNC;
  else if (mode[0] == 'a')
    flags = (flags == O_RDWR ? O_RDWR : O_WRONLY) | O_CREAT | O_APPEND;
  if (strchr(mode, 'x')) flags |= O_EXCL;
  return flags;
}

void noteOpen(int dirfd, const char* path, int flags, int fd) noexcept {
  FileLog* log = fileLog();
  if (!log || fd < 0 || !path || writes(flags) || (flags & O_DIRECTORY) || !log->wanted()) return;
  ReentryGuard g;
  if (!g) return;
  int e = errno;
  log->opened(dirfd, path, fd);
  errno = e;
}

void noteStat(int dirfd, const char* path, const struct stat* st) noexcept {
  FileLog* log = fileLog();
  if (!log || !st || !path || !*path || !log->wanted()) return;
  ReentryGuard g;
  if (!g) return;
  int e = errno;
  log->statted(dirfd, path, *st);
  errno = e;
}

void noteList(int dirfd, const char* path) noexcept {
  FileLog* log = fileLog();
  if (!log || !path || !log->wanted()) return;
  ReentryGuard g;
  if (!g) return;
  int e = errno;
  log->listed(dirfd, path);
  errno = e;
}

void noteRead(int fd, const void* buf, ssize_t got, int64_t end) noexcept {
  FileLog* log = fileLog();
  if (!log || got <= 0 || !log->largeOpened() || !log->wanted()) return;
  ReentryGuard g;
  if (!g) return;
  int e = errno;
  if (end < 0) end = ::lseek(fd, 0, SEEK_CUR);
  if (end >= 0) log->readFrom(fd, buf, static_cast<uint64_t>(got), end);
  errno = e;
}

}  // namespace dlrr::files

using namespace dlrr;
using namespace dlrr::files;

extern "C" {

// ---- C API (dlrr.h)
void dlrr_files_enable(void) {
  RecordSession* s = processRecorder();
  if (!s || !s->active()) return;
  ReentryGuard g;
  try {
    static std::once_flag once;
    std::call_once(once, [s] {
      gLog.store(::new (static_cast<void*>(gLogStorage)) FileLog(*s, wholeMaxFromEnvironment()),
                 std::memory_order_release);
    });
    if (FileLog* log = gLog.load()) log->enable();
  } catch (...) {
    DLRR_SWALLOWED();
  }
}

void dlrr_files_pause(int pause) { FileLog::pauseThisThread(pause != 0); }

void dlrr_files_exclude(const char* dir) {
  FileLog* log = fileLog();
  if (!log || !dir) return;
  ReentryGuard g;
  try {
    log->exclude(dir);
  } catch (...) {
    DLRR_SWALLOWED();
  }
}

uint64_t dlrr_files_whole_max(void) {
  FileLog* log = fileLog();
  return log ? log->wholeMax() : 0;
}

void dlrr_file_range(const char* path, uint64_t offset, const void* data, uint64_t n) {
  FileLog* log = fileLog();
  if (!log || !path || !log->wanted()) return;
  ReentryGuard g;
  log->range(path, offset, data, n);
}

// ---- reads of large files (record only: the bytes a job used of a file too large to keep whole)
__attribute__((visibility("default"))) ssize_t pread(int fd, void* buf, size_t n, off_t off) {
  static auto real = realFn<ssize_t (*)(int, void*, size_t, off_t)>("pread");
  ssize_t r = real(fd, buf, n, off);
  if (r > 0) noteRead(fd, buf, r, static_cast<int64_t>(off) + r);
  return r;
}

__attribute__((visibility("default"))) ssize_t pread64(int fd, void* buf, size_t n, off64_t off) {
  static auto real = realFn<ssize_t (*)(int, void*, size_t, off64_t)>("pread64");
  ssize_t r = real(fd, buf, n, off);
  if (r > 0) noteRead(fd, buf, r, static_cast<int64_t>(off) + r);
  return r;
}

__attribute__((visibility("default"))) size_t fread(void* __restrict buf, size_t size, size_t n,
                                                    FILE* __restrict stream) {
  static auto real = realFn<size_t (*)(void*, size_t, size_t, FILE*)>("fread");
  size_t r = real(buf, size, n, stream);
  if (r > 0 && size > 0)
    if (FileLog* log = fileLog(); log && log->largeOpened()) {
      off_t end = ::ftello(stream);  // the stream's position (buffered ahead of the fd's)
      if (end >= 0) noteRead(::fileno(stream), buf, static_cast<ssize_t>(r * size), end);
    }
  return r;
}

// ---- write-side hooks (replay only: otherwise straight to libc)
__attribute__((visibility("default"))) int rename(const char* from, const char* to) noexcept {
  static auto real = realFn<int (*)(const char*, const char*)>("rename");
  FileRedirect* fr = writeRedirect();
  if (!fr || !maybeNull(from) || !maybeNull(to)) return real(from, to);
  ReentryGuard g;
  if (!g) return real(from, to);
  std::string a = fr->resolve(AT_FDCWD, from), b = fr->resolve(AT_FDCWD, to);
  if (a.empty() || b.empty()) return real(from, to);
  return fr->rename(a, b);
}

__attribute__((visibility("default"))) int renameat(int fromFd, const char* from, int toFd, const char* to) noexcept {
  static auto real = realFn<int (*)(int, const char*, int, const char*)>("renameat");
  FileRedirect* fr = writeRedirect();
  if (!fr || !maybeNull(from) || !maybeNull(to)) return real(fromFd, from, toFd, to);
  ReentryGuard g;
  if (!g) return real(fromFd, from, toFd, to);
  std::string a = fr->resolve(fromFd, from), b = fr->resolve(toFd, to);
  if (a.empty() || b.empty()) return real(fromFd, from, toFd, to);
  return fr->rename(a, b);
}

__attribute__((visibility("default"))) int renameat2(int fromFd, const char* from, int toFd, const char* to,
                                                     unsigned flags) noexcept {
  static auto real = realFn<int (*)(int, const char*, int, const char*, unsigned)>("renameat2");
  FileRedirect* fr = writeRedirect();
  if (!fr || !maybeNull(from) || !maybeNull(to))
    return real ? real(fromFd, from, toFd, to, flags) : (errno = ENOSYS, -1);
  if (flags != 0) {  // RENAME_NOREPLACE / EXCHANGE on the overlay: not supported
    errno = EINVAL;
    return -1;
  }
  return renameat(fromFd, from, toFd, to);
}

__attribute__((visibility("default"))) int unlink(const char* path) noexcept {
  static auto real = realFn<int (*)(const char*)>("unlink");
  return overlay(
      AT_FDCWD, path, [](FileRedirect& fr, const std::string& abs) { return fr.remove(abs, false); },
      [&] { return real(path); });
}

__attribute__((visibility("default"))) int rmdir(const char* path) noexcept {
  static auto real = realFn<int (*)(const char*)>("rmdir");
  return overlay(
      AT_FDCWD, path, [](FileRedirect& fr, const std::string& abs) { return fr.remove(abs, true); },
      [&] { return real(path); });
}

__attribute__((visibility("default"))) int unlinkat(int dirfd, const char* path, int flags) noexcept {
  static auto real = realFn<int (*)(int, const char*, int)>("unlinkat");
  return overlay(
      dirfd, path,
      [flags](FileRedirect& fr, const std::string& abs) { return fr.remove(abs, (flags & AT_REMOVEDIR) != 0); },
      [&] { return real(dirfd, path, flags); });
}

__attribute__((visibility("default"))) int link(const char* from, const char* to) noexcept {
  static auto real = realFn<int (*)(const char*, const char*)>("link");
  FileRedirect* fr = writeRedirect();
  if (!fr || !maybeNull(from) || !maybeNull(to)) return real(from, to);
  ReentryGuard g;
  if (!g) return real(from, to);
  std::string a = fr->resolve(AT_FDCWD, from), b = fr->resolve(AT_FDCWD, to);
  if (a.empty() || b.empty()) return real(from, to);
  return fr->link(a, b);
}

__attribute__((visibility("default"))) int linkat(int fromFd, const char* from, int toFd, const char* to,
                                                  int flags) noexcept {
  static auto real = realFn<int (*)(int, const char*, int, const char*, int)>("linkat");
  FileRedirect* fr = writeRedirect();
  if (!fr || !maybeNull(from) || !maybeNull(to) || (flags & AT_EMPTY_PATH)) return real(fromFd, from, toFd, to, flags);
  ReentryGuard g;
  if (!g) return real(fromFd, from, toFd, to, flags);
  std::string a = fr->resolve(fromFd, from), b = fr->resolve(toFd, to);
  if (a.empty() || b.empty()) return real(fromFd, from, toFd, to, flags);
  return fr->link(a, b);
}

__attribute__((visibility("default"))) int symlink(const char* target, const char* path) noexcept {
  static auto real = realFn<int (*)(const char*, const char*)>("symlink");
  return overlay(
      AT_FDCWD, path, [target](FileRedirect& fr, const std::string& abs) { return fr.symlink(target, abs); },
      [&] { return real(target, path); });
}

__attribute__((visibility("default"))) int symlinkat(const char* target, int dirfd, const char* path) noexcept {
  static auto real = realFn<int (*)(const char*, int, const char*)>("symlinkat");
  return overlay(
      dirfd, path, [target](FileRedirect& fr, const std::string& abs) { return fr.symlink(target, abs); },
      [&] { return real(target, dirfd, path); });
}

__attribute__((visibility("default"))) int bind(int fd, const struct sockaddr* addr, socklen_t len) noexcept {
  static auto real = realFn<int (*)(int, const struct sockaddr*, socklen_t)>("bind");
  return socketCall(addr, len, true, [&](const struct sockaddr* a, socklen_t l) { return real(fd, a, l); });
}

__attribute__((visibility("default"))) int connect(int fd, const struct sockaddr* addr, socklen_t len) {
  static auto real = realFn<int (*)(int, const struct sockaddr*, socklen_t)>("connect");
  return socketCall(addr, len, false, [&](const struct sockaddr* a, socklen_t l) { return real(fd, a, l); });
}

__attribute__((visibility("default"))) int truncate(const char* path, off_t len) noexcept {
  static auto real = realFn<int (*)(const char*, off_t)>("truncate");
  return onCopy(AT_FDCWD, path, [&](int, const char* p) { return real(p, len); });
}

__attribute__((visibility("default"))) int truncate64(const char* path, off64_t len) noexcept {
  static auto real = realFn<int (*)(const char*, off64_t)>("truncate64");
  return onCopy(AT_FDCWD, path, [&](int, const char* p) { return real(p, len); });
}

__attribute__((visibility("default"))) int chmod(const char* path, mode_t mode) noexcept {
  static auto real = realFn<int (*)(const char*, mode_t)>("chmod");
  return onCopy(AT_FDCWD, path, [&](int, const char* p) { return real(p, mode); });
}

__attribute__((visibility("default"))) int fchmodat(int dirfd, const char* path, mode_t mode, int flags) noexcept {
  static auto real = realFn<int (*)(int, const char*, mode_t, int)>("fchmodat");
  return onCopy(dirfd, path, [&](int d, const char* p) { return real(d, p, mode, flags); });
}

__attribute__((visibility("default"))) int utimensat(int dirfd, const char* path, const struct timespec times[2],
                                                     int flags) noexcept {
  static auto real = realFn<int (*)(int, const char*, const struct timespec*, int)>("utimensat");
  return onCopy(dirfd, path, [&](int d, const char* p) { return real(d, p, times, flags); });
}

__attribute__((visibility("default"))) int utime(const char* path, const struct utimbuf* times) noexcept {
  static auto real = realFn<int (*)(const char*, const struct utimbuf*)>("utime");
  return onCopy(AT_FDCWD, path, [&](int, const char* p) { return real(p, times); });
}

__attribute__((visibility("default"))) int utimes(const char* path, const struct timeval times[2]) noexcept {
  static auto real = realFn<int (*)(const char*, const struct timeval*)>("utimes");
  return onCopy(AT_FDCWD, path, [&](int, const char* p) { return real(p, times); });
}

__attribute__((visibility("default"))) int creat(const char* path, mode_t mode) {
  return open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
}

__attribute__((visibility("default"))) int creat64(const char* path, mode_t mode) {
  return open64(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
}

}  // extern "C"
