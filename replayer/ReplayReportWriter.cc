#include "replayer/ReplayReportWriter.h"

#include <cstdlib>

namespace dlrr {

void ReplayReportWriter::fact(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lk(mu_);
  if (key == "warning")
    warnings_.push_back(value);
  else if (!addHookFact(facts_, key, value))
    warnings_.push_back("the Python hook sent a report fact this library does not know: " + key);
}

void ReplayReportWriter::warn(const std::string& text, size_t limit) {
  std::lock_guard<std::mutex> lk(mu_);
  if (warnings_.size() < limit) warnings_.push_back(text);
}

std::vector<std::string> ReplayReportWriter::warnings() const {
  std::lock_guard<std::mutex> lk(mu_);
  return warnings_;
}

std::string ReplayReportWriter::write(const std::string& stopReason,
                                      const std::function<void(ReplayReport&)>& figures) {
  const char* reportEnv = std::getenv("DLRR_REPORT");
  std::lock_guard<std::mutex> lk(mu_);
  std::string reason = stopReason;
  if (!finalStop_.empty())
    reason = finalStop_;
  else if (reason != "running" && reason != "exit")
    finalStop_ = reason;
  if (!reportEnv || !*reportEnv) return reason;
  ReplayReport r = facts_;
  r.attached = true;
  r.stop = parseStop(reason);
  figures(r);
  r.warnings = warnings_;
  writeReplayReportFile(std::string(reportEnv) + suffix_, r);  // under mu_: one writer at a time
  return reason;
}

}  // namespace dlrr
