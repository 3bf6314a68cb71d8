#pragma once
#include <cstdint>

namespace dlrr {
// Installs recording handlers for SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT. Each records
// the failure (async-signal-safe), then restores and chains to the previous disposition so
// the process dies (or recovers) exactly as it would have without dlrr.
void installFatalSignalHandlers() noexcept;
// first=true: where another handler was installed over ours since (Python's faulthandler, UCX's:
// they chain back to us by re-raising, so we would see raise()'s siginfo, not the fault's), put
// ours back on top; on a fatal signal we capture the stack, run those handlers (newest first),
// record, and the signal goes on as before. Called again after each such library may have
// loaded (the hook: at torch's import). first=false: put the oldest (faulthandler) back on top
// (before it is disabled, so that it restores ours). Returns the number of signals changed.
int takeFatalSignalsFirst(bool first) noexcept;
// Record, distributed ranks (the hook's hang watch): on SIGTERM, writes a byte to notifyFd and
// waits up to waitMs for one on ackFd (the watch writing where the rank waits), then the signal
// goes on to the previous disposition. Only over the default disposition: a job's own SIGTERM
// handling is left alone. Returns 1 installed, 0 left alone, -1 error.
int installTermNotice(int notifyFd, int ackFd, int waitMs) noexcept;
// Replay with --until crash --debug wait: on `sig` (the recorded fatal signal) the process
// says its PID and the `gdb -p` line on stderr and waits, in the handler, until a debugger
// attaches and detaches again, or SIGUSR1/SIGCONT; then the signal goes on to the previous
// disposition, so the crash happens as recorded. Async-signal-safe throughout.
void installReplayCrashPause(int sig) noexcept;
// Index in a captured stack (innermost first) of the frame that faulted: the one after the last
// signal frame (whose return address is `trampoline`, the signal restorer), else 0. A fault
// re-raised by another handler (Python's faulthandler, which the hook enables, always does)
// reaches our handler with that handler's and raise()'s frames above the faulting one.
inline int faultFrameIndex(const uint64_t* ips, int n, uint64_t trampoline) noexcept {
  int fault = 0;
  if (trampoline != 0)
    for (int i = 0; i + 1 < n; ++i)
      if (ips[i] == trampoline) fault = i + 1;
  return fault;
}
}  // namespace dlrr
