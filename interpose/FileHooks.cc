// libc entry points watched for triage: file-system lookups that fail (stat, access, mkdir,
// opendir, fopen and the fortified open variants; the plain open family lives in
// EntropyHooks.cc and reports here) and shared libraries that fail to load (dlopen). The
// same hooks carry data-less replay's file layer (FileServe.h): what succeeded is recorded,
// and in replay a missing path is served and a write goes to the scratch directory.
//
// Each hook calls the real function first and only looks at the result: on success it costs
// one predictable branch. Failures go to RecordSession::failedLookup, which keeps one entry
// per path (docs/triage.md). errno is preserved.
//
// dlopen is special: glibc resolves a bare library name ("libcudart.so.12") through the
// RPATH/RUNPATH of the *calling* object, which it finds from the return address. A wrapper
// that called the real dlopen would make libdlrr.so the caller and could change which file is
// found. So dlopen is an assembly trampoline: when the lookup may depend on the caller (a bare
// name from an object with an RPATH/RUNPATH, or a name with $ORIGIN-style tokens), or when
// not recording, it jumps straight into the real dlopen with the caller's return address
// untouched; otherwise (a path, or a caller without search paths) it calls the real dlopen
// and, on failure, records dlerror()'s message. In replay a path goes through the file
// redirect first (a library the replayed job wrote lives in the scratch overlay). Since reading dlerror() consumes the
// message, our dlerror hands the copy back to the job's next dlerror() call in that thread.
#include "interpose/FileHooks.h"

#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "interpose/ActiveSession.h"
#include "interpose/ErrorBoundary.h"
#include "interpose/FileServe.h"
#include "interpose/RealFn.h"
#include "interpose/ReentryGuard.h"
#include "interpose/SelfStat.h"

namespace dlrr {
namespace {

void note(int dirfd, const char* path, int error, LookupOp op) noexcept {
  RecordSession* s = processRecorder();
  if (!s || !path) return;
  ReentryGuard g;
  if (!g) return;
  s->failedLookup(dirfd, path, error, op);
}

// Wraps a call: on failure (result r indicates it), records and restores errno. `path` may be
// declared nonnull by libc's headers; a buggy caller may still pass NULL (the real function
// then fails with EFAULT), so the compiler is kept from assuming it is not.
template <typename R>
R checked(R r, bool failed, int dirfd, const char* path, LookupOp op) noexcept {
  asm("" : "+r"(path));
  if (failed && path && *path) {
    int e = errno;
    note(dirfd, path, e, op);
    errno = e;
  }
  return r;
}

LookupOp openOp(int flags) noexcept {
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & O_CREAT) || (flags & O_TRUNC)) return LookupOp::Create;
  if (flags & O_DIRECTORY) return LookupOp::Opendir;
  return LookupOp::Open;
}

LookupOp fopenOp(const char* mode) noexcept {
  return mode && (strchr(mode, 'w') || strchr(mode, 'a') || strchr(mode, '+')) ? LookupOp::Create : LookupOp::Open;
}

bool failedInt(int r) noexcept { return r != 0; }

// x86-64: struct stat and struct stat64 are the same layout.
static_assert(sizeof(struct stat) == sizeof(struct stat64));
const struct stat* asStat(const struct stat* st) noexcept { return st; }
const struct stat* asStat(const struct stat64* st) noexcept { return reinterpret_cast<const struct stat*>(st); }

// mkdir in replay: on the overlay of the scratch directory (FileRedirect).
template <typename Real>
int replayMkdir(int dirfd, const char* path, mode_t mode, Real&& real) {
  FileRedirect* fr = files::writeRedirect();
  if (!fr || !path) return real();
  ReentryGuard g;
  if (!g) return real();
  try {
    std::string abs = fr->resolve(dirfd, path);
    if (abs.empty()) return real();
    return fr->mkdir(abs, mode);
  } catch (...) {
    DLRR_SWALLOWED();
    errno = EIO;
    return -1;
  }
}

// ---- dlopen / dlerror
thread_local bool tDlPending = false;
thread_local char tDlMessage[1024];

using DlopenFn = void* (*)(const char*, int);
using DlerrorFn = char* (*)();

DlerrorFn realDlerror() noexcept {
  static DlerrorFn fn = realFn<DlerrorFn>("dlerror");
  return fn;
}

}  // namespace

void noteFailedOpen(int dirfd, const char* path, int flags, int error) noexcept {
  note(dirfd, path, error, openOp(flags));
  errno = error;
}

}  // namespace dlrr

using namespace dlrr;

extern "C" {

// Used by the dlopen trampoline below (hidden: not part of the library's interface).
__attribute__((visibility("hidden"))) DlopenFn dlrr_real_dlopen_ptr = nullptr;

// 1: jump straight into the real dlopen (the caller's context matters, or we do not record);
// 0: call it through dlrr_dlopen_observed.
__attribute__((visibility("hidden"))) int dlrr_dlopen_pass_through(const char* file, void* caller) {
  static DlopenFn real = [] {
    realDlerror();  // looked up now: a dlsym() after a failed dlopen would clear its message
    auto fn = realFn<DlopenFn>("dlopen");
    dlrr_real_dlopen_ptr = fn;
    return fn;
  }();
  if (!real) return 0;                                           // observed path returns NULL with a message
  if (file && strchr(file, '/') && files::redirect()) return 0;  // replay: the file may be in the overlay
  RecordSession* s = processRecorder();
  if (!s || !s->active() || !file) return 1;
  if (strchr(file, '$')) return 1;  // $ORIGIN, $LIB, $PLATFORM expand against the caller
  if (strchr(file, '/')) return 0;  // a path: found the same way whoever calls
  Dl_info info;
  void* extra = nullptr;
  if (!::dladdr1(caller, &info, &extra, RTLD_DL_LINKMAP) || !extra) return 1;
  auto* lm = static_cast<link_map*>(extra);
  for (const ElfW(Dyn)* d = lm->l_ld; d && d->d_tag != DT_NULL; ++d)
    if (d->d_tag == DT_RPATH || d->d_tag == DT_RUNPATH) return 1;  // its search path matters
  return 0;
}

__attribute__((visibility("hidden"))) void* dlrr_dlopen_observed(const char* file, int mode) {
  DlopenFn real = dlrr_real_dlopen_ptr;
  if (!real) return nullptr;
  // In replay, a library the job wrote (inductor's compiled kernels) is in the scratch overlay:
  // the loader's own open() is not ours, so the path is redirected here. The guard is held only
  // while deciding: the library's constructors are the job's (their entropy is replayed).
  std::string use;
  if (file && strchr(file, '/'))
    if (FileRedirect* fr = files::redirect()) {
      ReentryGuard g;
      std::string abs, fallback;  // never a served stand-in of a library
      if (g) use = files::readPath(*fr, AT_FDCWD, file, abs, fallback);
    }
  void* h = real(use.empty() ? file : use.c_str(), mode);
  if (h) return h;
  int e = errno;
  DlerrorFn derr = realDlerror();
  const char* msg = derr ? derr() : nullptr;
  snprintf(tDlMessage, sizeof tDlMessage, "%s", msg ? msg : "");
  tDlPending = msg != nullptr;  // our dlerror() hands it back once
  if (RecordSession* s = processRecorder()) {
    ReentryGuard g;
    if (g) s->libraryLoadError(file, tDlMessage);
  }
  errno = e;
  return nullptr;
}

__attribute__((visibility("default"))) char* dlerror(void) noexcept {
  DlerrorFn real = realDlerror();
  if (tDlPending) {
    tDlPending = false;
    char* newer = real ? real() : nullptr;  // a dl* error after the dlopen we observed wins
    return newer ? newer : tDlMessage;
  }
  return real ? real() : nullptr;
}

// Stack at entry: return address at 0(%rsp). Arguments rdi (file), rsi (mode) are saved
// around the decision, which gets the return address as its second argument.
asm(R"(
    .text
    .globl dlopen
    .type dlopen, @function
    .p2align 4
dlopen:
    .cfi_startproc
    pushq %rdi
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    subq $8, %rsp
    .cfi_adjust_cfa_offset 8
    movq 24(%rsp), %rsi
    call dlrr_dlopen_pass_through
    addq $8, %rsp
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdi
    .cfi_adjust_cfa_offset -8
    testl %eax, %eax
    jnz 1f
    jmp dlrr_dlopen_observed
1:
    jmp *dlrr_real_dlopen_ptr(%rip)
    .cfi_endproc
    .size dlopen, .-dlopen
)");

// ---- chdir: in replay, into a directory only the overlay has (one the replayed job made, such
// as inductor's build directory, which its compiler runs in; or one served from the trace). The
// working directory is then the overlay's copy, where relative writes belong anyway.
__attribute__((visibility("default"))) int chdir(const char* path) noexcept {
  static auto real = realFn<int (*)(const char*)>("chdir");
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  return files::lookup<int>(
      AT_FDCWD, path, [&](int, const char* p) { return real(p); }, failedInt);
}

// ---- stat family (glibc >= 2.33 exports these; older binaries call the __xstat family)
__attribute__((visibility("default"))) int stat(const char* __restrict path, struct stat* __restrict buf) noexcept {
  static auto real = realFn<int (*)(const char*, struct stat*)>("stat");
  int r = files::lookup<int>(
      AT_FDCWD, path, [&](int, const char* p) { return real(p, buf); }, failedInt);
  if (r == 0) files::noteStat(AT_FDCWD, path, asStat(buf));
  return checked(r, r != 0, AT_FDCWD, path, LookupOp::Stat);
}

__attribute__((visibility("default"))) int stat64(const char* __restrict path, struct stat64* __restrict buf) noexcept {
  static auto real = realFn<int (*)(const char*, struct stat64*)>("stat64");
  int r = files::lookup<int>(
      AT_FDCWD, path, [&](int, const char* p) { return real(p, buf); }, failedInt);
  if (r == 0) files::noteStat(AT_FDCWD, path, asStat(buf));
  return checked(r, r != 0, AT_FDCWD, path, LookupOp::Stat);
}

__attribute__((visibility("default"))) int lstat(const char* __restrict path, struct stat* __restrict buf) noexcept {
  static auto real = realFn<int (*)(const char*, struct stat*)>("lstat");
  int r = files::lookup<int>(
      AT_FDCWD, path, [&](int, const char* p) { return real(p, buf); }, failedInt);
  if (r == 0) files::noteStat(AT_FDCWD, path, asStat(buf));
  return checked(r, r != 0, AT_FDCWD, path, LookupOp::Stat);
}

__attribute__((visibility("default"))) int lstat64(const char* __restrict path,
                                                   struct stat64* __restrict buf) noexcept {
  static auto real = realFn<int (*)(const char*, struct stat64*)>("lstat64");
  int r = files::lookup<int>(
      AT_FDCWD, path, [&](int, const char* p) { return real(p, buf); }, failedInt);
  if (r == 0) files::noteStat(AT_FDCWD, path, asStat(buf));
  return checked(r, r != 0, AT_FDCWD, path, LookupOp::Stat);
}

__attribute__((visibility("default"))) int fstatat(int dirfd, const char* __restrict path, struct stat* __restrict buf,
                                                   int flags) noexcept {
  static auto real = realFn<int (*)(int, const char*, struct stat*, int)>("fstatat");
  int r = files::lookup<int>(
      dirfd, path, [&](int d, const char* p) { return real(d, p, buf, flags); }, failedInt);
  if (r == 0) files::noteStat(dirfd, path, asStat(buf));
  return checked(r, r != 0, dirfd, path, LookupOp::Stat);
}

__attribute__((visibility("default"))) int fstatat64(int dirfd, const char* __restrict path,
                                                     struct stat64* __restrict buf, int flags) noexcept {
  static auto real = realFn<int (*)(int, const char*, struct stat64*, int)>("fstatat64");
  int r = files::lookup<int>(
      dirfd, path, [&](int d, const char* p) { return real(d, p, buf, flags); }, failedInt);
  if (r == 0) files::noteStat(dirfd, path, asStat(buf));
  return checked(r, r != 0, dirfd, path, LookupOp::Stat);
}

__attribute__((visibility("default"))) int __xstat(int ver, const char* path, struct stat* buf) {
  static auto real = realVersioned<int (*)(int, const char*, struct stat*)>("__xstat", "GLIBC_2.2.5");
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  int r = files::lookup<int>(
      AT_FDCWD, path, [&](int, const char* p) { return real(ver, p, buf); }, failedInt);
  if (r == 0) files::noteStat(AT_FDCWD, path, asStat(buf));
  return checked(r, r != 0, AT_FDCWD, path, LookupOp::Stat);
}

__attribute__((visibility("default"))) int __xstat64(int ver, const char* path, struct stat64* buf) {
  static auto real = realVersioned<int (*)(int, const char*, struct stat64*)>("__xstat64", "GLIBC_2.2.5");
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  int r = files::lookup<int>(
      AT_FDCWD, path, [&](int, const char* p) { return real(ver, p, buf); }, failedInt);
  if (r == 0) files::noteStat(AT_FDCWD, path, asStat(buf));
  return checked(r, r != 0, AT_FDCWD, path, LookupOp::Stat);
}

__attribute__((visibility("default"))) int __lxstat(int ver, const char* path, struct stat* buf) {
  static auto real = realVersioned<int (*)(int, const char*, struct stat*)>("__lxstat", "GLIBC_2.2.5");
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  int r = files::lookup<int>(
      AT_FDCWD, path, [&](int, const char* p) { return real(ver, p, buf); }, failedInt);
  if (r == 0) files::noteStat(AT_FDCWD, path, asStat(buf));
  return checked(r, r != 0, AT_FDCWD, path, LookupOp::Stat);
}

__attribute__((visibility("default"))) int __lxstat64(int ver, const char* path, struct stat64* buf) {
  static auto real = realVersioned<int (*)(int, const char*, struct stat64*)>("__lxstat64", "GLIBC_2.2.5");
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  int r = files::lookup<int>(
      AT_FDCWD, path, [&](int, const char* p) { return real(ver, p, buf); }, failedInt);
  if (r == 0) files::noteStat(AT_FDCWD, path, asStat(buf));
  return checked(r, r != 0, AT_FDCWD, path, LookupOp::Stat);
}

// ---- access, mkdir, opendir
__attribute__((visibility("default"))) int access(const char* path, int mode) noexcept {
  static auto real = realFn<int (*)(const char*, int)>("access");
  int r = files::lookup<int>(
      AT_FDCWD, path, [&](int, const char* p) { return real(p, mode); }, failedInt);
  return checked(r, r != 0, AT_FDCWD, path, LookupOp::Access);
}

__attribute__((visibility("default"))) int faccessat(int dirfd, const char* path, int mode, int flags) noexcept {
  static auto real = realFn<int (*)(int, const char*, int, int)>("faccessat");
  int r = files::lookup<int>(
      dirfd, path, [&](int d, const char* p) { return real(d, p, mode, flags); }, failedInt);
  return checked(r, r != 0, dirfd, path, LookupOp::Access);
}

__attribute__((visibility("default"))) int mkdir(const char* path, mode_t mode) noexcept {
  static auto real = realFn<int (*)(const char*, mode_t)>("mkdir");
  int r = replayMkdir(AT_FDCWD, path, mode, [&] { return real(path, mode); });
  return checked(r, r != 0, AT_FDCWD, path, LookupOp::Mkdir);
}

__attribute__((visibility("default"))) int mkdirat(int dirfd, const char* path, mode_t mode) noexcept {
  static auto real = realFn<int (*)(int, const char*, mode_t)>("mkdirat");
  int r = replayMkdir(dirfd, path, mode, [&] { return real(dirfd, path, mode); });
  return checked(r, r != 0, dirfd, path, LookupOp::Mkdir);
}

__attribute__((visibility("default"))) DIR* opendir(const char* path) {
  static auto real = realFn<DIR* (*)(const char*)>("opendir");
  DIR* d = files::lookup<DIR*>(
      AT_FDCWD, path, [&](int, const char* p) { return real(p); }, [](DIR* r) { return r == nullptr; });
  if (d) files::noteList(AT_FDCWD, path);
  return checked(d, d == nullptr, AT_FDCWD, path, LookupOp::Opendir);
}

// ---- fopen and the fortified open variants (open(2) without a mode under _FORTIFY_SOURCE)
__attribute__((visibility("default"))) FILE* fopen(const char* __restrict path, const char* __restrict mode) {
  static auto real = realFn<FILE* (*)(const char*, const char*)>("fopen");
  int flags = files::fopenFlags(mode);
  FILE* f = files::openFile<FILE*>(
      AT_FDCWD, path, flags, [&](int, const char* p) { return real(p, mode); }, [](FILE* r) { return r == nullptr; },
      static_cast<FILE*>(nullptr));
  if (f) files::noteOpen(AT_FDCWD, path, flags, fileno(f));
  return selfStatAsWithoutDlrr(path, mode, checked(f, f == nullptr, AT_FDCWD, path, fopenOp(mode)));
}

__attribute__((visibility("default"))) FILE* fopen64(const char* __restrict path, const char* __restrict mode) {
  static auto real = realFn<FILE* (*)(const char*, const char*)>("fopen64");
  int flags = files::fopenFlags(mode);
  FILE* f = files::openFile<FILE*>(
      AT_FDCWD, path, flags, [&](int, const char* p) { return real(p, mode); }, [](FILE* r) { return r == nullptr; },
      static_cast<FILE*>(nullptr));
  if (f) files::noteOpen(AT_FDCWD, path, flags, fileno(f));
  return selfStatAsWithoutDlrr(path, mode, checked(f, f == nullptr, AT_FDCWD, path, fopenOp(mode)));
}

__attribute__((visibility("default"))) int __open_2(const char* path, int flags) {
  static auto real = realFn<int (*)(const char*, int)>("__open_2");
  int fd = files::openFile<int>(
      AT_FDCWD, path, flags, [&](int, const char* p) { return real(p, flags); }, [](int r) { return r < 0; }, -1);
  if (fd >= 0) files::noteOpen(AT_FDCWD, path, flags, fd);
  return checked(fd, fd < 0, AT_FDCWD, path, openOp(flags));
}

__attribute__((visibility("default"))) int __open64_2(const char* path, int flags) {
  static auto real = realFn<int (*)(const char*, int)>("__open64_2");
  int fd = files::openFile<int>(
      AT_FDCWD, path, flags, [&](int, const char* p) { return real(p, flags); }, [](int r) { return r < 0; }, -1);
  if (fd >= 0) files::noteOpen(AT_FDCWD, path, flags, fd);
  return checked(fd, fd < 0, AT_FDCWD, path, openOp(flags));
}

__attribute__((visibility("default"))) int __openat_2(int dirfd, const char* path, int flags) {
  static auto real = realFn<int (*)(int, const char*, int)>("__openat_2");
  int fd = files::openFile<int>(
      dirfd, path, flags, [&](int d, const char* p) { return real(d, p, flags); }, [](int r) { return r < 0; }, -1);
  if (fd >= 0) files::noteOpen(dirfd, path, flags, fd);
  return checked(fd, fd < 0, dirfd, path, openOp(flags));
}

__attribute__((visibility("default"))) int __openat64_2(int dirfd, const char* path, int flags) {
  static auto real = realFn<int (*)(int, const char*, int)>("__openat64_2");
  int fd = files::openFile<int>(
      dirfd, path, flags, [&](int d, const char* p) { return real(d, p, flags); }, [](int r) { return r < 0; }, -1);
  if (fd >= 0) files::noteOpen(dirfd, path, flags, fd);
  return checked(fd, fd < 0, dirfd, path, openOp(flags));
}

}  // extern "C"
