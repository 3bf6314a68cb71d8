#include "triage/Names.h"

#include <cerrno>
#include <csignal>
#include <cstdio>

namespace dlrr::triage {

std::string errnoName(int e) {
  switch (e) {
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case EIO: return "EIO";
    case ENXIO: return "ENXIO";
    case ENOMEM: return "ENOMEM";
    case EACCES: return "EACCES";
    case EEXIST: return "EEXIST";
    case ENODEV: return "ENODEV";
    case ENOTDIR: return "ENOTDIR";
    case EISDIR: return "EISDIR";
    case EINVAL: return "EINVAL";
    case ENFILE: return "ENFILE";
    case EMFILE: return "EMFILE";
    case ENOSPC: return "ENOSPC";
    case EROFS: return "EROFS";
    case ENAMETOOLONG: return "ENAMETOOLONG";
    case ELOOP: return "ELOOP";
    case EDQUOT: return "EDQUOT";
    default: return "errno " + std::to_string(e);
  }
}

std::string errnoText(int e) {
  switch (e) {
    case EPERM: return "Operation not permitted";
    case ENOENT: return "No such file or directory";
    case EACCES: return "Permission denied";
    case ENOTDIR: return "Not a directory";
    case EISDIR: return "Is a directory";
    case ENOSPC: return "No space left on device";
    case EROFS: return "Read-only file system";
    case ELOOP: return "Too many levels of symbolic links";
    case ENAMETOOLONG: return "File name too long";
    case EDQUOT: return "Disk quota exceeded";
    case EMFILE: return "Too many open files";
    case ENFILE: return "Too many open files in system";
    default: return errnoName(e);
  }
}

std::string signalName(int sig) {
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    default: return "signal " + std::to_string(sig);
  }
}

const char* lookupOpName(int op) {
  static const char* names[] = {"open", "create", "stat", "access", "mkdir", "opendir", "other"};
  return op >= 0 && op <= 6 ? names[op] : "other";
}

std::string bytesText(uint64_t n) {
  char b[32];
  if (n >= (1ull << 30)) std::snprintf(b, sizeof b, "%.1f GiB", static_cast<double>(n) / (1ull << 30));
  else if (n >= (1ull << 20)) std::snprintf(b, sizeof b, "%.1f MiB", static_cast<double>(n) / (1ull << 20));
  else if (n >= 1024) std::snprintf(b, sizeof b, "%.1f KiB", static_cast<double>(n) / 1024);
  else std::snprintf(b, sizeof b, "%llu B", static_cast<unsigned long long>(n));
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
  if (s < 7200) std::snprintf(b, sizeof b, "%lld min %lld s", whole / 60, whole % 60);
  else std::snprintf(b, sizeof b, "%lld h %lld min", whole / 3600, (whole % 3600) / 60);
  return b;
}

}  // namespace dlrr::triage
