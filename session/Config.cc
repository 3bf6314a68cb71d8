#include "session/Config.h"

#include <cstdlib>
#include <cstring>

namespace dlrr {

Config Config::fromEnvironment() {
  Config c;
  const char* mode = std::getenv("DLRR_MODE");
  const char* trace = std::getenv("DLRR_TRACE");
  if (!mode || !trace || !*trace) return c;
  if (std::strcmp(mode, "record") == 0)
    c.mode = Mode::Record;
  else if (std::strcmp(mode, "replay") == 0)
    c.mode = Mode::Replay;
  else
    return c;
  c.traceDir = trace;
  if (const char* cap = std::getenv("DLRR_CAPTURE")) {
    if (std::strcmp(cap, "process") == 0)
      c.capture = CaptureLevel::Process;
    else if (std::strcmp(cap, "minimal") == 0)
      c.capture = CaptureLevel::Minimal;
    else if (std::strcmp(cap, "full") == 0)
      c.capture = CaptureLevel::Full;
  }
  if (const char* k = std::getenv("DLRR_RING_STEPS")) {
    char* end = nullptr;
    long v = std::strtol(k, &end, 10);
    if (end != k && *end == '\0' && v >= 0 && v <= 64) c.ringSteps = static_cast<int>(v);
  }
  if (const char* k = std::getenv("DLRR_WINDOW")) {
    char* end = nullptr;
    long v = std::strtol(k, &end, 10);
    if (end != k && *end == '\0' && v >= 0 && v <= 4096) c.window = static_cast<int>(v);
  }
  if (const char* b = std::getenv("DLRR_BUDGET")) {
    char* end = nullptr;
    unsigned long long v = std::strtoull(b, &end, 10);
    if (end != b && *end == '\0' && b[0] != '-') c.budget = v;
  }
  if (const char* fd = std::getenv("DLRR_STATUS_FD")) {
    char* end = nullptr;
    long v = std::strtol(fd, &end, 10);
    unsigned long long ino = 0;
    if (end != fd && *end == ':') {
      char* inoEnd = nullptr;
      ino = std::strtoull(end + 1, &inoEnd, 10);
      end = inoEnd != end + 1 ? inoEnd : end;
    }
    if (end != fd && *end == '\0' && v > 2 && v < 65536) {
      c.statusFd = static_cast<int>(v);
      c.statusIno = ino;
    }
  }
  if (const char* col = std::getenv("DLRR_COLLECTIVES")) c.keepCollectives = std::strcmp(col, "full") == 0;
  if (const char* s = std::getenv("DLRR_REPLAY_STREAM")) c.replayStream = s;
  return c;
}

const char* captureLevelName(CaptureLevel c) noexcept {
  switch (c) {
    case CaptureLevel::Process:
      return "process";
    case CaptureLevel::Minimal:
      return "minimal";
    case CaptureLevel::Default:
      return "default";
    case CaptureLevel::Full:
      return "full";
  }
  return "?";
}

}  // namespace dlrr
