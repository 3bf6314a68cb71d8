#pragma once
// A whole trace (directory of streams) opened for reading, and the summary every tool shows.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "format/StreamReader.h"
#include "format/TraceError.h"

namespace dlrr {

struct FailureInfo {
  std::string kind;  // nonfinite | exception | signal
  int64_t step = -1;
  std::string where;
  std::string message;
  std::string exceptionType;
  int signal = 0;
  std::string stream;
  bool betweenSteps = false;  // `step` had ended when it happened (e.g. right after optimizer.step())
  // nonfinite: the failing step's failure-ring tensors announced by the failure, and how many
  // of them reached the stream (fewer: the process ended while they were being written).
  uint32_t ringTensors = 0;
  uint32_t ringWritten = 0;
  // Ring tensors (any step) left out: changed in place after their hook, not what it digested.
  uint32_t ringChanged = 0;
};

struct StepInfo {
  int64_t step = -1;
  double loss = 0;  // NaN when none
  uint64_t nonFinite = 0;
  uint64_t batchBytes = 0;
  uint32_t digests = 0;
  // XXH3-64 over (kind, path, callIndex, output, hash) of the step's digest events, in order:
  // equal fingerprints mean bit-identical recorded tensors. 0 when the step has no digests.
  uint64_t digestFingerprint = 0;
  uint64_t digestEvents = 0;
  bool untrained = false;  // no backward() nor optimizer.step() ran: no loss, not a training step
};

struct StreamSummary {
  std::string name;
  std::string role;
  int pid = 0;
  int ppid = 0;
  std::vector<std::string> argv;
  bool cleanClose = false;
  std::string damage;
  bool torn = false;  // `damage` is only a torn tail (StreamStatus::torn): recovered
  uint64_t events = 0;
  uint64_t steps = 0;           // completed training steps (untrained ones not counted)
  uint64_t untrainedSteps = 0;  // completed steps with no backward() nor optimizer.step()
  std::optional<int> exitCode;
  std::optional<FailureInfo> failure;  // the stream's first failure
  // Its first exception or fatal signal: what ended it, also when a non-finite `failure`
  // came first (a NaN, then clip_grad_norm_(error_if_nonfinite=True) raising).
  std::optional<FailureInfo> crash;
  uint64_t bytes = 0;
  uint64_t rawBytes = 0;
  uint64_t fileBytes = 0;  // size on disk, footer and trailer included
};

// A stream that could not be opened at all (Trace::open with OpenMode::Tolerant).
struct BrokenStream {
  std::string name;
  ErrorKind kind = ErrorKind::Corrupt;
  std::string message;
  bool torn = false;  // cut short while its writer created it (TraceError::torn): holds nothing
};

struct TraceSummary {
  std::string formatVersion;
  std::vector<std::string> command;
  std::string host;
  std::string user;
  int64_t createdNs = 0;
  std::optional<int> exitCode;
  uint64_t steps = 0;           // completed training steps of the main (training) stream
  uint64_t untrainedSteps = 0;  // and its steps that trained nothing (StepEnd.untrained)
  std::string mainStream;
  std::optional<FailureInfo> failure;  // the first failure in the main stream, else any
  std::optional<FailureInfo> crash;    // the main stream's first exception or fatal signal, else any
  std::vector<StreamSummary> processes;
  uint64_t bytes = 0;
  uint64_t rawBytes = 0;
  std::vector<std::string> notes;    // recorder status messages (what was not recorded, and why)
  std::vector<BrokenStream> broken;  // streams that could not be opened (tolerant open only)
  uint64_t fileBytes = 0;            // all stream files on disk
};

enum class OpenMode {
  Strict,    // any stream that cannot be opened fails the whole open
  Tolerant,  // such streams are listed in broken(); fails only when no stream opens, or
             // when any stream needs a newer dlrr (FutureVersion)
};

class Trace {
 public:
  // Throws TraceError with a one-line message for anything that is not a readable trace.
  static std::unique_ptr<Trace> open(const std::string& path, OpenMode mode = OpenMode::Strict);
  // A trace made of already opened streams (in-memory readers, fuzzing).
  static std::unique_ptr<Trace> fromStreams(const std::string& displayPath,
                                            std::vector<std::unique_ptr<StreamReader>> streams);

  const std::string& path() const { return path_; }
  std::vector<std::unique_ptr<StreamReader>>& streams() { return streams_; }
  StreamReader* find(const std::string& name);
  // The launcher stream (dlrecord's): "launcher", or with one dlrecord per rank the first of
  // "launcher.rank<R>". Null when the trace has none.
  StreamReader* launcher();
  // The stream whose process trained (has steps); the first process stream when none has.
  StreamReader* mainStream();
  // The process stream of distributed rank `rank`: the one of restart `restart` when there is
  // one, else its latest restart. Null when the trace holds no such rank.
  StreamReader* findRank(int rank, int restart = -1);

  const std::vector<BrokenStream>& broken() const { return broken_; }

  TraceSummary summarize();
  // One entry per completed step of `s`, in order.
  std::vector<StepInfo> steps(StreamReader& s);
  // Same, streamed: fn sees each step as its StepEnd is read, so a caller keeps the steps
  // before a damaged frame even when the read then throws TraceError(Corrupt).
  void forEachStep(StreamReader& s, const std::function<void(const StepInfo&)>& fn);

  static constexpr const char* kLauncherName = "launcher";

 private:
  std::string path_;
  UniqueFd dir_;
  std::vector<std::unique_ptr<StreamReader>> streams_;
  std::vector<BrokenStream> broken_;
  std::optional<std::string> main_;
};

std::string formatFailure(const FailureInfo& f);
// A Failure event of stream `stream` as FailureInfo.
FailureInfo failureInfo(schema::Failure::Reader f, const std::string& stream);
// Raw bytes referenced by a structured value (tensor data, bytes, text; 8 per scalar).
uint64_t valueBytes(schema::Value::Reader v);

}  // namespace dlrr
