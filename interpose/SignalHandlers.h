#pragma once
namespace dlrr {
// Installs recording handlers for SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT. Each records
// the failure (async-signal-safe), then restores and chains to the previous disposition so
// the process dies (or recovers) exactly as it would have without dlrr.
void installFatalSignalHandlers() noexcept;
// Replay with --until crash --debug wait: on `sig` (the recorded fatal signal) the process
// says its PID and the `gdb -p` line on stderr and waits, in the handler, until a debugger
// attaches and detaches again, or SIGUSR1/SIGCONT; then the signal goes on to the previous
// disposition, so the crash happens as recorded. Async-signal-safe throughout.
void installReplayCrashPause(int sig) noexcept;
}  // namespace dlrr
