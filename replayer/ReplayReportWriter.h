#pragma once
// The replay report as this process writes it (replayer/ReplayReport.h): the hook's facts and
// the warnings collected through the replay, the stop reason that sticks, and the file under
// $DLRR_REPORT (one per rank with --all-ranks). The figures are the session's, handed in at
// each write. Its own lock, a leaf but for the index's (nothing else is taken under it).
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "replayer/ReplayReport.h"

namespace dlrr {

class ReplayReportWriter {
 public:
  // `suffix` follows $DLRR_REPORT in the file's name (".rank<R>" with --all-ranks).
  explicit ReplayReportWriter(std::string suffix = "") : suffix_(std::move(suffix)) {}

  // One of the hook's facts (addHookFact's keys; "warning" adds a warning).
  void fact(const std::string& key, const std::string& value);
  // A warning for the report; dropped when `limit` warnings are already there.
  void warn(const std::string& text, size_t limit = SIZE_MAX);
  std::vector<std::string> warnings() const;
  // Writes the report file now when $DLRR_REPORT names one: the facts, then `figures` fills
  // in the session's own (it must not take the writer's lock). The first real stop reason
  // sticks: a later "exit" or "running" does not undo it. Returns the reason written.
  std::string write(const std::string& stopReason, const std::function<void(ReplayReport&)>& figures);

  void lockForFork() noexcept { mu_.lock(); }
  void unlockAfterFork() noexcept { mu_.unlock(); }

 private:
  const std::string suffix_;
  mutable std::mutex mu_;
  ReplayReport facts_;  // the hook's (fact()), but its warnings: those join warnings_
  std::vector<std::string> warnings_;
  std::string finalStop_;
};

}  // namespace dlrr
