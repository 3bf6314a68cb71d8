#include "tools/dlreplay/TraceEnd.h"

#include <csignal>
#include <cstring>

#include "tools/common/Text.h"

namespace dlrr {

std::string traceCutReason(const StreamSummary& stream, std::optional<int> jobExit,
                           const std::vector<std::string>& notes) {
  constexpr size_t kTextMax = 200;
  if (stream.cleanClose) return "";
  // The recorder's own word first: a write that failed (ENOSPC) stopped recording mid-run.
  // (dlrecord notes it as "pid PID: recording stopped: ..."; this process's note first).
  const std::string own = "pid " + std::to_string(stream.pid) + ": recording stopped";
  const std::string* stopped = nullptr;
  for (const auto& n : notes)
    if (n.find(own) != std::string::npos || (!stopped && n.find("recording stopped") != std::string::npos))
      stopped = &n;
  if (stopped) {
    const size_t at = stopped->find("recording stopped");
    return tools::printableSummary(stopped->substr(at), kTextMax);
  }
  if (jobExit && *jobExit > 128 && *jobExit < 128 + 65) {
    const int sig = *jobExit - 128;
    const char* name = strsignal(sig);
    std::string why = "the recorded job was killed by signal " + std::to_string(sig) + " (" +
                      std::string(name ? name : "?") + (sig == SIGTERM ? ", e.g. a timeout" : "") + ")";
    return why;
  }
  if (jobExit)
    return "the recorded job exited with status " + std::to_string(*jobExit) +
           " but its stream was not closed: recording stopped while it ran (a write failed, e.g. a full disk)";
  std::string why =
      "the recorded process's stream was not closed (the process or dlrecord was killed, or "
      "recording stopped)";
  if (!stream.damage.empty()) why += "; " + tools::printableSummary(stream.damage, kTextMax);
  return why;
}

}  // namespace dlrr
