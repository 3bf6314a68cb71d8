#pragma once
// The replay report: what the replayed job's library (ReplaySession) tells dlreplay at every
// verified step and at the stop, in the file named by DLRR_REPORT. Both sides hold it as this
// struct; the file is one Cap'n Proto message (format/schema/report.capnp), replaced whole
// through a temporary file and a rename, so that dlreplay, reading it after the job ended or was
// killed at any moment, sees the last complete report, never a torn one.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlrr {

struct ReplayReport {
  enum class Stop { Running, Exit, Target, EndOfRecording, Divergence, Unservable, Stop };
  struct Divergence {
    int64_t step = 0;
    std::string kind;  // "module output", "gradient", ... (TensorDigest.Kind, named)
    std::string path;
    std::string detail;
    bool operator==(const Divergence&) const = default;
  };
  struct Launches {
    int64_t stepsChecked = 0;
    int64_t stepsMatched = 0;
    bool operator==(const Launches&) const = default;
  };
  struct LaunchDivergence {
    int64_t step = -1;
    uint64_t position = 0;
    std::string detail;
    bool operator==(const LaunchDivergence&) const = default;
  };
  struct Dist {
    int32_t rank = -1;  // the recorded rank
    uint64_t issued = 0, recorded = 0, tensorsVerified = 0, resultsServed = 0;
    bool operator==(const Dist&) const = default;
  };

  // False: there is no report (the process never attached to the trace, or the file is
  // missing, empty or not a report); every other field is then its default.
  bool attached = false;
  Stop stop = Stop::Running;
  std::string target;  // ReplayTarget::describe()
  int64_t targetStep = -1;
  std::string targetWhere;
  int64_t verifiedSteps = 0;  // consecutive from the jump step
  int64_t recordedSteps = 0;
  int64_t lastStep = -1;
  std::optional<int64_t> jumpStep;
  std::optional<Divergence> divergence;
  // GPU (docs/gpu.md). A text said twice keeps both, one a line.
  std::optional<std::string> gpuCapture, gpuRecorded, launchAtStop;
  std::optional<Launches> launches;
  std::optional<LaunchDivergence> launchDivergence;
  uint64_t incomparableDigests = 0;
  std::optional<Dist> dist;
  // What the Python hook added (dlrr_replay_fact, addHookFact). A text said twice keeps both,
  // one a line.
  std::optional<std::string> stopStep;  // "-": between steps
  std::optional<std::string> stopWhere, backwardFunction, backwardForwardLine, envThreads, gpuCaptureStatus,
      jumpRestored, exception, exceptionWhere, distGroup, distCommHook, explainOp, explainLine, explainInputs,
      explainCause, explainHistory, whatIfChange, whatIfVerdict, whatIfLosses;
  std::vector<std::string> batchSamples, unverified;
  std::vector<std::string> warnings;

  bool operator==(const ReplayReport&) const = default;
};

// "running", "target", "end-of-recording", ... as the hook and dlrr_replay_stop name them.
const char* stopName(ReplayReport::Stop s);
// The stop a reason names; an unknown reason is Stop::Stop.
ReplayReport::Stop parseStop(std::string_view reason);

// Adds one of the hook's facts ("stop.step", "warning", ...) to its field; false (nothing
// added) for a key the report has no field for.
bool addHookFact(ReplayReport& r, std::string_view key, const std::string& value);

// "3 of 5 recorded issued; 4 tensors verified; 2 results served".
std::string collectivesText(const ReplayReport::Dist& d);

// The report as named entries, sorted by name ("verified_steps", "divergence.detail", ...; a
// list is one entry, one value a line): dlreplay --json's "report" object and the text
// output's detail lines. Empty when there is no report.
std::map<std::string, std::string> reportEntries(const ReplayReport& r);
// Whether reportEntries' entry `key` holds an integer ("verified_steps", "divergence.step", ...;
// the hook's "stop.step" too, which is "-" between steps): dlreplay --json writes those as JSON
// numbers.
bool isIntegerEntry(std::string_view key);

// The file's bytes, and back; a decoded empty, truncated or foreign text is no report.
std::string encodeReplayReport(const ReplayReport& r);
ReplayReport decodeReplayReport(std::string_view bytes);

// Replaces the report at `path` (a regular file dlreplay made; nothing is written otherwise)
// by writing `path`.tmp.<pid> and renaming it over `path`. False when it could not.
bool writeReplayReportFile(const std::string& path, const ReplayReport& r);
// decodeReplayReport of the file (no report when it cannot be read).
ReplayReport readReplayReportFile(const std::string& path);
// Removes the temporary files a writer killed between its write and its rename left beside
// `path` (and beside `path`.rank<R>).
void removeReplayReportTemporaries(const std::string& path);

}  // namespace dlrr
