#include "interpose/SignalHandlers.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <dlfcn.h>
#include <execinfo.h>

#include <atomic>
#include <cstdint>

#include "interpose/ProcessRecorder.h"

namespace dlrr {
namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
constexpr int kMaxFrames = 64;
struct sigaction gPrevious[NSIG];
std::atomic<bool> gInHandler{false};

// libunwind is loaded privately (RTLD_LOCAL): linked normally, its exported _Unwind_* would
// take over C++ exception unwinding for the whole job. Debian ships no PIC archive of it.
using BacktraceFn = int (*)(void**, int);
BacktraceFn gBacktrace = nullptr;

int captureStack(void** out, int max) noexcept {
  if (gBacktrace) return gBacktrace(out, max);
  return backtrace(out, max);  // glibc fallback; warmed up at install
}
// Alternate stack so that a stack overflow can still be recorded (main thread).
alignas(16) unsigned char gAltStack[64 * 1024];

void chain(int sig, siginfo_t* info, void* uctx) noexcept {
  const struct sigaction& prev = gPrevious[sig];
  sigaction(sig, &prev, nullptr);
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction) {
      prev.sa_sigaction(sig, info, uctx);
      return;
    }
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
    return;
  }
  // Default disposition: re-raise. The signal is blocked until we return, so it is delivered
  // then (a faulting instruction would also fault again on return).
  raise(sig);
}

void onFatal(int sig, siginfo_t* info, void* uctx) {
  int savedErrno = errno;
  if (!gInHandler.exchange(true)) {
    if (RecordSession* s = processRecorder()) {
      uint64_t ips[kMaxFrames];
      void* raw[kMaxFrames];
      int n = captureStack(raw, kMaxFrames);
      // Skip our own frames (this handler and the signal trampoline are the first ones).
      int skip = n > 1 ? 1 : 0;
      int m = 0;
      for (int i = skip; i < n; ++i) ips[m++] = reinterpret_cast<uint64_t>(raw[i]);
      s->onFatalSignal(sig, info, ips, m);
    }
  }
  chain(sig, info, uctx);
  errno = savedErrno;
}

}  // namespace

void installFatalSignalHandlers() noexcept {
  if (void* h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL)) {
    gBacktrace = reinterpret_cast<BacktraceFn>(dlsym(h, "unw_backtrace"));
  }
  // Warm the unwinder up outside signal context (it initialises caches on first use).
  void* warm[4];
  captureStack(warm, 4);
  stack_t ss{};
  ss.ss_sp = gAltStack;
  ss.ss_size = sizeof gAltStack;
  stack_t old{};
  if (sigaltstack(nullptr, &old) == 0 && (old.ss_flags & SS_DISABLE)) sigaltstack(&ss, nullptr);
  for (int sig : kSignals) {
    struct sigaction sa{};
    sa.sa_sigaction = onFatal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, &gPrevious[sig]);
  }
}

}  // namespace dlrr
