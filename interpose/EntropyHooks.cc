// libc entry points through which a program gets entropy from the OS. Each calls the real
// function and hands the bytes to the recorder, in order. Python's hash seed, `random`,
// NumPy seeding (getrandom) and torch.seed() (/dev/urandom via open+read) all pass here.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <stdarg.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

#include "dlrr/dlrr.h"
#include "format/EntropyFlags.h"
#include "interpose/ActiveSession.h"
#include "interpose/ErrorBoundary.h"
#include "interpose/FileHooks.h"
#include "interpose/FileServe.h"
#include "interpose/RealFn.h"
#include "interpose/ReentryGuard.h"
#include "recorder/OwnFds.h"

namespace dlrr {
namespace {

// Which fds are open on /dev/urandom or /dev/random: bit 2*fd (urandom) / 2*fd+1 (random).
constexpr int kMaxFd = 4096;
std::atomic<uint64_t> gFdBits[kMaxFd * 2 / 64];

void markFd(int fd, int which) noexcept {
  if (fd < 0 || fd >= kMaxFd) return;
  unsigned bit = static_cast<unsigned>(fd) * 2 + static_cast<unsigned>(which);
  gFdBits[bit / 64].fetch_or(1ull << (bit % 64), std::memory_order_relaxed);
}

void clearFd(int fd) noexcept {
  if (fd < 0 || fd >= kMaxFd) return;
  unsigned bit = static_cast<unsigned>(fd) * 2;
  gFdBits[bit / 64].fetch_and(~(3ull << (bit % 64)), std::memory_order_relaxed);
}

// -1: not an entropy fd; 0: urandom; 1: random.
int fdKind(int fd) noexcept {
  if (fd < 0 || fd >= kMaxFd) return -1;
  unsigned bit = static_cast<unsigned>(fd) * 2;
  uint64_t w = gFdBits[bit / 64].load(std::memory_order_relaxed) >> (bit % 64);
  return (w & 1) ? 0 : (w & 2) ? 1 : -1;
}

int entropyPathKind(const char* path) noexcept {
  if (!path) return -1;
  if (strcmp(path, "/dev/urandom") == 0) return 0;
  if (strcmp(path, "/dev/random") == 0) return 1;
  return -1;
}

void afterOpen(const char* path, int fd) noexcept {
  if (fd < 0) return;
  int k = entropyPathKind(path);
  if (k >= 0)
    markFd(fd, k);
  else if (fdKind(fd) >= 0)
    clearFd(fd);  // fd reused for another file
}

// Depth of dlrr_entropy_loader_scope on this thread: DataLoader machinery draws (EntropyFlags.h).
thread_local int tLoaderScope = 0;

void recordEntropy(schema::Entropy::Source src, unsigned flags, const void* buf, ssize_t got, size_t asked) noexcept {
  if (got <= 0) return;
  RecordSession* s = processRecorder();
  if (!s) return;
  if (tLoaderScope > 0) flags |= kEntropyLoaderDraw;
  ReentryGuard g;
  if (!g) return;
  try {
    s->entropy(src, flags, buf, static_cast<size_t>(got), asked);
  } catch (...) {
    DLRR_SWALLOWED();
  }
}

// Replay: the recorded bytes instead of the OS's, while the requests match the recording.
bool serve(schema::Entropy::Source src, void* buf, size_t n, ssize_t& result) noexcept {
  ReplaySession* r = processReplayer();
  if (!r) return false;
  ReentryGuard g;
  if (!g) return false;
  try {
    size_t got = 0;
    if (!r->serveEntropy(src, buf, n, got)) return false;
    result = static_cast<ssize_t>(got);
    return true;
  } catch (...) {
    DLRR_SWALLOWED();
    return false;
  }
}

void afterRead(int fd, const void* buf, ssize_t got, size_t asked) noexcept {
  int k = fdKind(fd);
  if (k < 0 || got <= 0) return;
  recordEntropy(k == 0 ? schema::Entropy::Source::DEV_URANDOM : schema::Entropy::Source::DEV_RANDOM, 0, buf, got,
                asked);
}

mode_t modeArg(int flags, va_list ap) noexcept {
  // The caller va_start()ed `ap`; clang-analyzer 14 cannot follow a va_list into a callee.
  // NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized)
  return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? static_cast<mode_t>(va_arg(ap, int)) : 0;
}

}  // namespace
}  // namespace dlrr

using namespace dlrr;

extern "C" {

__attribute__((visibility("default"))) ssize_t getrandom(void* buf, size_t n, unsigned flags) {
  static auto real = realFn<ssize_t (*)(void*, size_t, unsigned)>("getrandom");
  ssize_t served;
  if (serve(schema::Entropy::Source::GETRANDOM, buf, n, served)) return served;
  ssize_t r = real(buf, n, flags);
  recordEntropy(schema::Entropy::Source::GETRANDOM, flags, buf, r, n);
  return r;
}

__attribute__((visibility("default"))) int getentropy(void* buf, size_t n) {
  static auto real = realFn<int (*)(void*, size_t)>("getentropy");
  ssize_t served;
  if (serve(schema::Entropy::Source::GETENTROPY, buf, n, served) && served == static_cast<ssize_t>(n)) return 0;
  int r = real(buf, n);
  if (r == 0) recordEntropy(schema::Entropy::Source::GETENTROPY, 0, buf, static_cast<ssize_t>(n), n);
  return r;
}

__attribute__((visibility("default"))) int open(const char* path, int flags, ...) {
  static auto real = realFn<int (*)(const char*, int, ...)>("open");
  va_list ap;
  va_start(ap, flags);
  mode_t mode = modeArg(flags, ap);
  va_end(ap);
  int fd = files::openFile<int>(  // data-less replay: FileServe.h
      AT_FDCWD, path, flags, [&](int, const char* p) { return real(p, flags, mode); }, [](int r) { return r < 0; }, -1);
  if (fd < 0)
    noteFailedOpen(AT_FDCWD, path, flags, errno);  // triage: FileHooks.cc
  else
    files::noteOpen(AT_FDCWD, path, flags, fd);
  afterOpen(path, fd);
  return fd;
}

__attribute__((visibility("default"))) int open64(const char* path, int flags, ...) {
  static auto real = realFn<int (*)(const char*, int, ...)>("open64");
  va_list ap;
  va_start(ap, flags);
  mode_t mode = modeArg(flags, ap);
  va_end(ap);
  int fd = files::openFile<int>(  // data-less replay: FileServe.h
      AT_FDCWD, path, flags, [&](int, const char* p) { return real(p, flags, mode); }, [](int r) { return r < 0; }, -1);
  if (fd < 0)
    noteFailedOpen(AT_FDCWD, path, flags, errno);  // triage: FileHooks.cc
  else
    files::noteOpen(AT_FDCWD, path, flags, fd);
  afterOpen(path, fd);
  return fd;
}

__attribute__((visibility("default"))) int openat(int dirfd, const char* path, int flags, ...) {
  static auto real = realFn<int (*)(int, const char*, int, ...)>("openat");
  va_list ap;
  va_start(ap, flags);
  mode_t mode = modeArg(flags, ap);
  va_end(ap);
  int fd = files::openFile<int>(  // data-less replay: FileServe.h
      dirfd, path, flags, [&](int d, const char* p) { return real(d, p, flags, mode); }, [](int r) { return r < 0; },
      -1);
  if (fd < 0)
    noteFailedOpen(dirfd, path, flags, errno);  // triage: FileHooks.cc
  else
    files::noteOpen(dirfd, path, flags, fd);
  afterOpen(path, fd);
  return fd;
}

__attribute__((visibility("default"))) int openat64(int dirfd, const char* path, int flags, ...) {
  static auto real = realFn<int (*)(int, const char*, int, ...)>("openat64");
  va_list ap;
  va_start(ap, flags);
  mode_t mode = modeArg(flags, ap);
  va_end(ap);
  int fd = files::openFile<int>(  // data-less replay: FileServe.h
      dirfd, path, flags, [&](int d, const char* p) { return real(d, p, flags, mode); }, [](int r) { return r < 0; },
      -1);
  if (fd < 0)
    noteFailedOpen(dirfd, path, flags, errno);  // triage: FileHooks.cc
  else
    files::noteOpen(dirfd, path, flags, fd);
  afterOpen(path, fd);
  return fd;
}

__attribute__((visibility("default"))) ssize_t read(int fd, void* buf, size_t n) {
  static auto real = realFn<ssize_t (*)(int, void*, size_t)>("read");
  ssize_t served;
  if (int k = fdKind(fd);
      k >= 0 &&
      serve(k == 0 ? schema::Entropy::Source::DEV_URANDOM : schema::Entropy::Source::DEV_RANDOM, buf, n, served))
    return served;
  ssize_t r = real(fd, buf, n);
  if (fdKind(fd) >= 0)
    afterRead(fd, buf, r, n);
  else
    files::noteRead(fd, buf, r);  // data-less replay: bytes of a large file (FileServe.h)
  return r;
}

__attribute__((visibility("default"))) ssize_t __read_chk(int fd, void* buf, size_t n, size_t buflen) {
  static auto real = realFn<ssize_t (*)(int, void*, size_t, size_t)>("__read_chk");
  ssize_t served;
  if (int k = fdKind(fd);
      k >= 0 && n <= buflen &&
      serve(k == 0 ? schema::Entropy::Source::DEV_URANDOM : schema::Entropy::Source::DEV_RANDOM, buf, n, served))
    return served;
  ssize_t r = real(fd, buf, n, buflen);
  if (fdKind(fd) >= 0)
    afterRead(fd, buf, r, n);
  else
    files::noteRead(fd, buf, r);
  return r;
}

__attribute__((visibility("default"))) int close(int fd) {
  static auto real = realFn<int (*)(int)>("close");
  if (isProtectedFd(fd)) return 0;  // the recorder's own fd: left open so its number is never reused
  clearFd(fd);
  return real(fd);
}

// os.closerange() (Python uses close_range), closefrom(), daemonising code: every fd in the
// range is closed except the recorder's own (see recorder/OwnFds.h).
__attribute__((visibility("default"))) int close_range(unsigned first, unsigned last, int flags) {
  static auto real = realFn<int (*)(unsigned, unsigned, int)>("close_range");
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  int mine[16];
  int n = protectedFdsIn(first, last, mine, 16);
  auto closeSpan = [&](unsigned lo, unsigned hi) {
    int r = real(lo, hi, flags);
    if (r == 0 && !(flags & CLOSE_RANGE_CLOEXEC))
      for (unsigned fd = lo; fd <= hi && fd < static_cast<unsigned>(kMaxFd); ++fd) clearFd(static_cast<int>(fd));
    return r;
  };
  unsigned from = first;
  for (int i = 0; i < n; ++i) {  // the spans between our fds (sorted, all within the range)
    unsigned mineFd = static_cast<unsigned>(mine[i]);
    if (mineFd > from)
      if (int r = closeSpan(from, mineFd - 1)) return r;
    from = mineFd + 1;
  }
  if (n == 0 || (from <= last && from != 0)) return closeSpan(from, last);
  return 0;
}

__attribute__((visibility("default"))) void closefrom(int lowfd) {
  static auto real = realFn<void (*)(int)>("closefrom");
  if (lowfd < 0) lowfd = 0;
  int mine[1];
  if (protectedFdsIn(static_cast<unsigned>(lowfd), ~0u, mine, 1) == 0) {
    if (real) real(lowfd);
    return;
  }
  close_range(static_cast<unsigned>(lowfd), ~0u, 0);
}

}  // extern "C"

extern "C" void dlrr_entropy_loader_scope(int enter) {
  dlrr::tLoaderScope += enter ? 1 : (dlrr::tLoaderScope > 0 ? -1 : 0);
}
