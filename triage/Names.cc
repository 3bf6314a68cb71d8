#include "triage/Names.h"

#include <cerrno>
#include <csignal>
#include <cstdio>

namespace dlrr::triage {

std::string errnoName(int e) {
  switch (e) {
    case EPERM:
      return "EPERM";
    case ENOENT:
      return "ENOENT";
    case EIO:
      return "EIO";
    case ENXIO:
      return "ENXIO";
    case ENOMEM:
      return "ENOMEM";
    case EACCES:
      return "EACCES";
    case EEXIST:
      return "EEXIST";
    case ENODEV:
      return "ENODEV";
    case ENOTDIR:
      return "ENOTDIR";
    case EISDIR:
      return "EISDIR";
    case EINVAL:
      return "EINVAL";
    case ENFILE:
      return "ENFILE";
    case EMFILE:
      return "EMFILE";
    case ENOSPC:
      return "ENOSPC";
    case EROFS:
      return "EROFS";
    case ENAMETOOLONG:
      return "ENAMETOOLONG";
    case ELOOP:
      return "ELOOP";
    case EDQUOT:
      return "EDQUOT";
    default:
      return "errno " + std::to_string(e);
  }
}

std::string errnoText(int e) {
  switch (e) {
    case EPERM:
      return "Operation not permitted";
    case ENOENT:
      return "No such file or directory";
    case EACCES:
      return "Permission denied";
    case ENOTDIR:
      return "Not a directory";
    case EISDIR:
      return "Is a directory";
    case ENOSPC:
      return "No space left on device";
    case EROFS:
      return "Read-only file system";
    case ELOOP:
      return "Too many levels of symbolic links";
    case ENAMETOOLONG:
      return "File name too long";
    case EDQUOT:
      return "Disk quota exceeded";
    case EMFILE:
      return "Too many open files";
    case ENFILE:
      return "Too many open files in system";
    default:
      return errnoName(e);
  }
}

bool isCrashSignal(int sig) noexcept {
  for (int s : kCrashSignals)
    if (s == sig) return true;
  return false;
}

std::string signalName(int sig) {
  switch (sig) {
    case SIGHUP:
      return "SIGHUP";
    case SIGINT:
      return "SIGINT";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGILL:
      return "SIGILL";
    case SIGTRAP:
      return "SIGTRAP";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGKILL:
      return "SIGKILL";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGUSR2:
      return "SIGUSR2";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGALRM:
      return "SIGALRM";
    case SIGTERM:
      return "SIGTERM";
    case SIGXCPU:
      return "SIGXCPU";
    case SIGXFSZ:
      return "SIGXFSZ";
    default:
      return "signal " + std::to_string(sig);
  }
}

const char* lookupOpName(int op) {
  static const char* names[] = {"open", "create", "stat", "access", "mkdir", "opendir", "other"};
  return op >= 0 && op <= 6 ? names[op] : "other";
}

std::string bytesText(uint64_t n) {
  char b[32];
  if (n >= (1ull << 30))
    std::snprintf(b, sizeof b, "%.1f GiB", static_cast<double>(n) / (1ull << 30));
  else if (n >= (1ull << 20))
    std::snprintf(b, sizeof b, "%.1f MiB", static_cast<double>(n) / (1ull << 20));
  else if (n >= 1024)
    std::snprintf(b, sizeof b, "%.1f KiB", static_cast<double>(n) / 1024);
  else
    std::snprintf(b, sizeof b, "%llu B", static_cast<unsigned long long>(n));
  return b;
}

std::string secondsText(double s) {
  char b[64];
  // Durations come from trace bytes: a corrupt one may be NaN, negative or absurdly large, so
  // convert through a clamped 64-bit integer (a double past INT_MAX cast to int is UB).
  if (!(s >= 0) || s > 1e15) return "unknown";
  if (s < 120) {
    std::snprintf(b, sizeof b, "%.1f s", s);
    return b;
  }
  auto whole = static_cast<long long>(s);
  if (s < 7200)
    std::snprintf(b, sizeof b, "%lld min %lld s", whole / 60, whole % 60);
  else
    std::snprintf(b, sizeof b, "%lld h %lld min", whole / 3600, (whole % 3600) / 60);
  return b;
}

std::string signalCauseText(int sig, int code, uint64_t address) {
  // Codes raised by the kernel for a fault (si_code > 0), from <asm-generic/siginfo.h>.
  struct Cause {
    int sig, code;
    const char* name;
    const char* text;
  };
  static constexpr Cause kCauses[] = {
      {11, 1, "SEGV_MAPERR", "address not mapped"},
      {11, 2, "SEGV_ACCERR", "access not permitted"},
      {7, 1, "BUS_ADRALN", "misaligned address"},
      {7, 2, "BUS_ADRERR", "nonexistent physical address"},
      {7, 3, "BUS_OBJERR", "object error (e.g. a file mapping beyond its end)"},
      {8, 1, "FPE_INTDIV", "integer divide by zero"},
      {8, 2, "FPE_INTOVF", "integer overflow"},
      {8, 3, "FPE_FLTDIV", "floating-point divide by zero"},
      {8, 4, "FPE_FLTOVF", "floating-point overflow"},
      {8, 7, "FPE_FLTINV", "invalid floating-point operation"},
      {4, 1, "ILL_ILLOPC", "illegal opcode"},
      {4, 2, "ILL_ILLOPN", "illegal operand"},
      {4, 5, "ILL_PRVOPC", "privileged opcode"},
  };
  char hex[32];
  std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(address));
  if (code > 0) {
    for (const Cause& c : kCauses)
      if (c.sig == sig && c.code == code) {
        std::string t = std::string(c.text) + " (" + c.name + ")";
        if (sig == 11 || sig == 7) {
          t += std::string(" at ") + hex;
          // Linux maps nothing below vm.mmap_min_addr (64 KiB by default): a small address is a
          // null pointer plus a field or element offset.
          if (sig == 11 && address < 65536) t += ": a null pointer dereference";
        }
        return t;
      }
    return "";
  }
  if (code == 0) return "sent with kill() by a process (SI_USER)";
  if (code == -6) return "sent by the process to itself (SI_TKILL: raise(), abort(), or a handler re-raising)";
  if (code == -1) return "sent with sigqueue() (SI_QUEUE)";
  return "";
}

}  // namespace dlrr::triage
