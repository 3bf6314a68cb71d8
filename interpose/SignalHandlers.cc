#include "interpose/SignalHandlers.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

#include "interpose/ActiveSession.h"
#include "recorder/HighFds.h"
#include "recorder/OwnFds.h"

namespace dlrr {
namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
constexpr int kMaxFrames = 64;
struct sigaction gPrevious[NSIG];
std::atomic<bool> gInHandler{false};
std::atomic<bool> gInstalled{false};
// Handlers that were installed over ours and chain back to us (Python's faulthandler, which
// the hook enables after the library loaded; UCX's, which Debian 13's torch loads at import and
// which re-raises with tgkill). On top, they would reach us only through a re-raise, without
// the kernel's siginfo (fault code and address); so we take the top slot back and call them
// ourselves, newest first, before recording (takeFatalSignalsFirst). Oldest first here.
constexpr int kMaxAbove = 4;
struct sigaction gAbove[NSIG][kMaxAbove];
std::atomic<int> gAboveCount[NSIG];

// libunwind is loaded privately (RTLD_LOCAL): linked normally, its exported _Unwind_* would
// take over C++ exception unwinding for the whole job. Debian ships no PIC archive of it.
using BacktraceFn = int (*)(void**, int);
BacktraceFn gBacktrace = nullptr;

// Set while the unwinder is warmed up at start-up (one thread): libunwind then opens the pipe
// it validates addresses with and keeps it for the life of the process; pipe2() below moves
// that pipe above the job's descriptor limit (recorder/HighFds.h).
std::atomic<bool> gWarmingUnwinder{false};

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

// The signal trampoline (glibc's __restore_rt), the return address of every signal frame that
// a handler installed with sigaction() runs on; 0 when unknown.
uint64_t signalTrampoline(int sig) noexcept {
#if defined(__linux__) && defined(__GLIBC__)
  struct sigaction cur {};
  if (sigaction(sig, nullptr, &cur) == 0) return reinterpret_cast<uint64_t>(cur.sa_restorer);
#else
  (void)sig;
#endif
  return 0;
}

// Runs the handler that was above ours (see gAbove). True when it re-raised the signal: the
// signal is blocked while we run, so that delivery comes when we return and chains on then;
// false when it returned without (e.g. faulthandler disabled meanwhile): the caller chains.
bool callAbove(int sig, siginfo_t* info, void* uctx) noexcept {
  int n = gAboveCount[sig].load(std::memory_order_acquire);
  if (n <= 0) return false;
  for (int k = n - 1; k >= 0; --k) {  // newest first, as the chain they built would have run
    const struct sigaction& above = gAbove[sig][k];
    if (above.sa_flags & SA_SIGINFO) {
      if (above.sa_sigaction) above.sa_sigaction(sig, info, uctx);
    } else if (above.sa_handler != SIG_DFL && above.sa_handler != SIG_IGN) {
      above.sa_handler(sig);
    }
  }
  sigset_t pending;
  return sigpending(&pending) == 0 && sigismember(&pending, sig) == 1;
}

void onFatal(int sig, siginfo_t* info, void* uctx);

struct sigaction fatalAction() noexcept {
  struct sigaction sa {};
  sa.sa_sigaction = onFatal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  return sa;
}

void onFatal(int sig, siginfo_t* info, void* uctx) {
  int savedErrno = errno;
  if (!gInHandler.exchange(true)) {
    RecordSession* s = processRecorder();
    uint64_t ips[kMaxFrames];
    int m = 0;
    if (s) {
      void* raw[kMaxFrames];
      int n = captureStack(raw, kMaxFrames);
      // Skip our own frame (captureStack's caller: this handler).
      for (int i = n > 1 ? 1 : 0; i < n; ++i) ips[m++] = reinterpret_cast<uint64_t>(raw[i]);
    }
    // faulthandler (when above ours) writes the Python stacks that the failure embeds.
    bool reraised = callAbove(sig, info, uctx);
    if (s) s->onFatalSignal(sig, info, ips, m, faultFrameIndex(ips, m, signalTrampoline(sig)));
    if (reraised) {
      errno = savedErrno;
      return;
    }
  }
  chain(sig, info, uctx);
  errno = savedErrno;
}

// --- replay: pause at the recorded fatal signal (--debug wait) ---------------------------

volatile sig_atomic_t gResume = 0;
char gSignalName[32];

void onResume(int) { gResume = 1; }

// Appends text / a decimal number to buf (bounded), for one write(2).
struct Line {
  char buf[512];
  size_t n = 0;
  Line& operator<<(const char* s) {
    while (*s && n + 1 < sizeof buf) buf[n++] = *s++;
    return *this;
  }
  Line& operator<<(long v) {
    char d[24];
    int k = 0;
    unsigned long u = v < 0 ? 0ul - static_cast<unsigned long>(v) : static_cast<unsigned long>(v);
    do d[k++] = static_cast<char>('0' + u % 10);
    while ((u /= 10) && k < 24);
    if (v < 0 && n + 1 < sizeof buf) buf[n++] = '-';
    while (k > 0 && n + 1 < sizeof buf) buf[n++] = d[--k];
    return *this;
  }
  void write() const {
    size_t off = 0;
    while (off < n) {
      ssize_t w = ::write(STDERR_FILENO, buf + off, n - off);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return;
      off += static_cast<size_t>(w);
    }
  }
};

// TracerPid of process `pid` (from /proc/PID/status); -1 when it cannot be read.
long tracerPid(long pid) noexcept {
  Line path;
  path << "/proc/" << pid << "/status";
  path.buf[path.n] = '\0';
  int fd = ::open(path.buf, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char b[4096];
  size_t n = 0;
  for (;;) {
    ssize_t r = ::read(fd, b + n, sizeof b - 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += static_cast<size_t>(r);
    if (n + 1 >= sizeof b) break;
  }
  ::close(fd);
  b[n] = '\0';
  const char* p = strstr(b, "TracerPid:");
  if (!p) return -1;
  p += 10;
  while (*p == ' ' || *p == '\t') ++p;
  long v = 0;
  while (*p >= '0' && *p <= '9') v = v * 10 + (*p++ - '0');
  return v;
}

void pause50ms() noexcept {
  struct timespec ts {
    0, 50 * 1000 * 1000
  };
  nanosleep(&ts, nullptr);
}

// A debugger that attaches stops every thread of the process, so only another process can see
// the attach and the detach: a watcher, started with a raw clone (no fork handlers, nothing but
// system calls in the child), sends SIGUSR1 when the job's TracerPid goes from set back to 0.
// Returns the watcher's pid, or -1.
long startTracerWatcher(long pid) noexcept {
  long child = ::syscall(SYS_clone, static_cast<unsigned long>(SIGCHLD), 0ul, 0ul, 0ul, 0ul);
  if (child != 0) return child;  // the job (or -1)
  bool attached = false;
  for (;;) {
    if (static_cast<long>(::syscall(SYS_getppid)) != pid) break;  // the job is gone
    long t = tracerPid(pid);
    if (t < 0) break;
    if (t > 0) {
      attached = true;
    } else if (attached) {
      ::kill(static_cast<pid_t>(pid), SIGUSR1);
      break;
    }
    pause50ms();
  }
  ::syscall(SYS_exit_group, 0);
  __builtin_unreachable();
}

void onReplayFatal(int sig, siginfo_t* info, void* uctx) {
  int savedErrno = errno;
  // Only the replayed process itself (a forked child, e.g. a worker, is deactivated).
  if (processReplayer() && !gInHandler.exchange(true)) {
    long pid = static_cast<long>(::getpid());
    struct sigaction sa {};
    sa.sa_handler = onResume;
    sigemptyset(&sa.sa_mask);
    struct sigaction oldUsr1 {
    }, oldCont{};
    sigaction(SIGUSR1, &sa, &oldUsr1);
    sigaction(SIGCONT, &sa, &oldCont);
    sigset_t unblock;
    sigemptyset(&unblock);
    sigaddset(&unblock, SIGUSR1);
    sigaddset(&unblock, SIGCONT);
    sigset_t oldMask;
    pthread_sigmask(SIG_UNBLOCK, &unblock, &oldMask);
    // Told only now: a SIGUSR1 sent as soon as the line shows must find the handler in place.
    (Line() << "dlrr: replay stopped (target): the recorded fatal signal " << gSignalName << " ("
            << static_cast<long>(sig) << ")\ndlrr: process " << pid << " is waiting for a debugger:\ndlrr:   gdb -p "
            << pid << "        attach (the crash goes on when gdb detaches or quits)\ndlrr:   kill -USR1 " << pid
            << "    let the crash go on without attaching\n")
        .write();
    long watcher = startTracerWatcher(pid);
    while (!gResume) pause50ms();  // every call here is async-signal-safe
    if (watcher > 0) {
      ::kill(static_cast<pid_t>(watcher), SIGKILL);
      while (::waitpid(static_cast<pid_t>(watcher), nullptr, 0) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &oldMask, nullptr);
    sigaction(SIGUSR1, &oldUsr1, nullptr);
    sigaction(SIGCONT, &oldCont, nullptr);
    (Line() << "dlrr: resumed; the crash goes on\n").write();
  }
  chain(sig, info, uctx);
  errno = savedErrno;
}

// --- record: the launcher's SIGTERM, answered by the hook's hang watch ----------------------

std::atomic<int> gTermNotifyFd{-1};
std::atomic<int> gTermAckFd{-1};
std::atomic<int> gTermWaitMs{0};
std::atomic<bool> gTermSeen{false};
std::atomic<pid_t> gTermOwner{0};  // a forked child (a DataLoader worker) inherits the handler, not the watch

// Wakes the hook's watch thread (which blocks SIGTERM, so this never runs on it) and gives it
// up to gTermWaitMs to write where the rank waits, then the signal goes on as before.
void onTerm(int sig, siginfo_t* info, void* uctx) {
  int savedErrno = errno;
  int notify = gTermNotifyFd.load();
  int ack = gTermAckFd.load();
  if (notify >= 0 && ack >= 0 && getpid() == gTermOwner.load() && !gTermSeen.exchange(true)) {
    char b = 't';
    if (write(notify, &b, 1) == 1) {
      struct timespec start {};
      clock_gettime(CLOCK_MONOTONIC, &start);
      long waitMs = gTermWaitMs.load();
      for (;;) {
        struct timespec now {};
        clock_gettime(CLOCK_MONOTONIC, &now);
        long left = waitMs - ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000);
        if (left <= 0) break;
        struct pollfd p {};
        p.fd = ack;
        p.events = POLLIN;
        int rc = poll(&p, 1, static_cast<int>(left));
        if (rc > 0 || (rc < 0 && errno != EINTR)) break;  // answered, or its end closed at exit
      }
    }
  }
  chain(sig, info, uctx);
  errno = savedErrno;
}

}  // namespace

int installTermNotice(int notifyFd, int ackFd, int waitMs) noexcept {
  if (notifyFd < 0 || ackFd < 0 || waitMs < 0) return -1;
  struct sigaction cur {};
  if (sigaction(SIGTERM, nullptr, &cur) != 0) return -1;
  // The job's own SIGTERM handling (ignored, or a handler of its own) is left alone.
  if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler != SIG_DFL) return 0;
  if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == onTerm) return 1;
  if (cur.sa_flags & SA_SIGINFO) return 0;
  gTermWaitMs = waitMs;
  gTermOwner = getpid();
  gTermAckFd = ackFd;
  gTermNotifyFd = notifyFd;
  gPrevious[SIGTERM] = cur;
  struct sigaction sa {};
  sa.sa_sigaction = onTerm;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  return sigaction(SIGTERM, &sa, nullptr) == 0 ? 1 : -1;
}

void installReplayCrashPause(int sig) noexcept {
  if (sig <= 0 || sig >= NSIG || sig == SIGKILL || sig == SIGSTOP || sig == SIGUSR1 || sig == SIGCONT) return;
  const char* name = sigabbrev_np(sig);
  Line l;
  l << "SIG" << (name ? name : "?");
  size_t k = l.n < sizeof gSignalName - 1 ? l.n : sizeof gSignalName - 1;
  memcpy(gSignalName, l.buf, k);
  gSignalName[k] = '\0';
  stack_t ss{};
  ss.ss_sp = gAltStack;
  ss.ss_size = sizeof gAltStack;
  stack_t old{};
  if (sigaltstack(nullptr, &old) == 0 && (old.ss_flags & SS_DISABLE)) sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_sigaction = onReplayFatal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, &gPrevious[sig]);
}

void installFatalSignalHandlers() noexcept {
  if (void* h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL)) {
    gBacktrace = reinterpret_cast<BacktraceFn>(dlsym(h, "unw_backtrace"));
  }
  // Warm the unwinder up outside signal context (it initialises caches on first use).
  void* warm[4];
  gWarmingUnwinder.store(true);
  captureStack(warm, 4);
  gWarmingUnwinder.store(false);
  stack_t ss{};
  ss.ss_sp = gAltStack;
  ss.ss_size = sizeof gAltStack;
  stack_t old{};
  if (sigaltstack(nullptr, &old) == 0 && (old.ss_flags & SS_DISABLE)) sigaltstack(&ss, nullptr);
  struct sigaction sa = fatalAction();
  for (int sig : kSignals) sigaction(sig, &sa, &gPrevious[sig]);
  gInstalled.store(true);
}

int takeFatalSignalsFirst(bool first) noexcept {
  if (!gInstalled.load()) return 0;
  int n = 0;
  struct sigaction ours = fatalAction();
  for (int sig : kSignals) {
    int count = gAboveCount[sig].load();
    if (!first) {
      // The oldest (faulthandler) back on top: disabling it then restores ours. Newer ones
      // (UCX) chained to ours when they were installed, so ours keeps calling them.
      if (count > 0 && sigaction(sig, &gAbove[sig][0], nullptr) == 0) {
        gAboveCount[sig].store(0, std::memory_order_release);  // no handler reads them while we shift
        for (int k = 1; k < count; ++k) gAbove[sig][k - 1] = gAbove[sig][k];
        gAboveCount[sig].store(count - 1, std::memory_order_release);
        ++n;
      }
      continue;
    }
    struct sigaction cur {};
    if (count >= kMaxAbove || sigaction(sig, nullptr, &cur) != 0) continue;
    bool siginfo = cur.sa_flags & SA_SIGINFO;
    if (siginfo ? (cur.sa_sigaction == onFatal || !cur.sa_sigaction)
                : (cur.sa_handler == SIG_DFL || cur.sa_handler == SIG_IGN))
      continue;  // ours is on top already, or nothing is above it
    gAbove[sig][count] = cur;
    gAboveCount[sig].store(count + 1, std::memory_order_release);
    if (sigaction(sig, &ours, nullptr) == 0)
      ++n;
    else
      gAboveCount[sig].store(count);
  }
  return n;
}

}  // namespace dlrr

// Only the unwinder's pipe, made during the warm-up, is moved (and kept open whatever the job
// closes: libunwind would otherwise make a new one, in the job's numbers, at the first crash).
// Every other caller gets libc's pipe2 unchanged.
extern "C" __attribute__((visibility("default"))) int pipe2(int fds[2], int flags) {
  static auto real = reinterpret_cast<int (*)(int*, int)>(dlsym(RTLD_NEXT, "pipe2"));
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  int r = real(fds, flags);
  if (r == 0 && dlrr::gWarmingUnwinder.load(std::memory_order_relaxed)) {
    for (int i = 0; i < 2; ++i) {
      fds[i] = dlrr::moveAboveFdLimit(fds[i]);
      dlrr::protectFd(fds[i]);
    }
  }
  return r;
}
