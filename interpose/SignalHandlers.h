#pragma once
namespace dlrr {
// Installs recording handlers for SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT. Each records
// the failure (async-signal-safe), then restores and chains to the previous disposition so
// the process dies (or recovers) exactly as it would have without dlrr.
void installFatalSignalHandlers() noexcept;
}  // namespace dlrr
