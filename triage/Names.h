#pragma once
// Small naming helpers shared by triage, dltrace and dlreplay.
#include <csignal>
#include <cstdint>
#include <string>

namespace dlrr::triage {

// "ENOENT" for 2, "errno 131" for what it does not know.
std::string errnoName(int error);
// "No such file or directory" (strerror), independent of the locale.
std::string errnoText(int error);
// The signals a process raises on itself by what it executes: a bad access (SEGV, BUS), an
// illegal or trapping instruction (ILL, TRAP), an arithmetic fault (FPE), abort() (ABRT), a
// system call its seccomp filter forbids (SYS). A process they kill crashed natively, whether
// the recorder caught it or not; any other signal that kills one came from outside.
inline constexpr int kCrashSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGFPE, SIGABRT, SIGSYS};
bool isCrashSignal(int sig) noexcept;
// "SIGKILL" for 9, "signal 64" otherwise.
std::string signalName(int sig);
// What a fatal signal's siginfo says: "address not mapped (SEGV_MAPERR) at 0x10: a null pointer
// dereference", "sent with kill() by a process (SI_USER)"; "" when it says nothing (code 0 with
// no signal, an unknown code).
std::string signalCauseText(int sig, int code, uint64_t address);
// schema MissingPath.Op as text: open, create, stat, access, mkdir, opendir, other.
const char* lookupOpName(int op);
// 1536 -> "1.5 KiB"; 0 -> "0 B".
std::string bytesText(uint64_t n);
// 12.3456 -> "12.3 s", 3723 -> "1 h 2 min".
std::string secondsText(double s);

}  // namespace dlrr::triage
