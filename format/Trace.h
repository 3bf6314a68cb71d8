#pragma once
// A whole trace (directory of streams) opened for reading, and the summary every tool shows.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "format/StreamReader.h"

namespace dlrr {

struct FailureInfo {
  std::string kind;  // nonfinite | exception | signal
  int64_t step = -1;
  std::string where;
  std::string message;
  std::string exceptionType;
  int signal = 0;
  std::string stream;
};

struct StepInfo {
  int64_t step = -1;
  double loss = 0;  // NaN when none
  uint64_t nonFinite = 0;
  uint64_t batchBytes = 0;
  uint32_t digests = 0;
};

struct StreamSummary {
  std::string name;
  std::string role;
  int pid = 0;
  int ppid = 0;
  std::vector<std::string> argv;
  bool cleanClose = false;
  std::string damage;
  uint64_t events = 0;
  uint64_t steps = 0;
  std::optional<int> exitCode;
  uint64_t bytes = 0;
  uint64_t rawBytes = 0;
};

struct TraceSummary {
  std::string formatVersion;
  std::vector<std::string> command;
  std::string host;
  std::string user;
  int64_t createdNs = 0;
  std::optional<int> exitCode;
  uint64_t steps = 0;           // completed steps of the main (training) stream
  std::string mainStream;
  std::optional<FailureInfo> failure;  // the first failure in the main stream, else any
  std::vector<StreamSummary> processes;
  uint64_t bytes = 0;
  uint64_t rawBytes = 0;
  std::vector<std::string> notes;  // recorder status messages (what was not recorded)
};

class Trace {
 public:
  // Throws TraceError with a one-line message for anything that is not a readable trace.
  static std::unique_ptr<Trace> open(const std::string& path);

  const std::string& path() const { return path_; }
  std::vector<std::unique_ptr<StreamReader>>& streams() { return streams_; }
  StreamReader* find(const std::string& name);
  StreamReader* launcher() { return find(kLauncherName); }
  // The stream whose process trained (has steps); the first process stream when none has.
  StreamReader* mainStream();

  TraceSummary summarize();
  // One entry per completed step of `s`, in order.
  std::vector<StepInfo> steps(StreamReader& s);

  static constexpr const char* kLauncherName = "launcher";

 private:
  std::string path_;
  UniqueFd dir_;
  std::vector<std::unique_ptr<StreamReader>> streams_;
  std::optional<std::string> main_;
};

std::string formatFailure(const FailureInfo& f);

}  // namespace dlrr
