#pragma once
// What triage looks at, as plain data: read from a trace by gatherFacts() (TraceFacts.h), or
// built by hand in tests for failures this machine cannot produce (CUDA out of memory, a
// missing libcudart, an NCCL timeout).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "format/Wavefront.h"

namespace dlrr::triage {

struct Frame {
  std::string file;
  int line = 0;
  std::string function;
  std::string code;
};

struct FailureRecord {
  std::string kind;           // exception | signal | nonfinite
  std::string exceptionType;  // "FileNotFoundError", "json.decoder.JSONDecodeError", ...
  std::string message;
  std::string where;             // file:line (exception), module path (nonfinite), symbol (signal)
  std::vector<Frame> traceback;  // innermost last
  int signal = 0;
  int signalCode = 0;
  uint64_t faultAddress = 0;  // signals the kernel raised for a fault (signalCode > 0)
  int64_t step = -1;          // the step in progress (-1: before the first)
  int64_t tNs = -1;           // since its stream started
  std::string stream;
  std::string pythonStack;  // faulthandler's dump (signals)
};

struct MissingPathRecord {
  std::string path;
  int error = 0;  // errno
  int op = 0;     // schema MissingPath.Op: open create stat access mkdir opendir other
  uint64_t count = 0;
  int64_t firstNs = -1;
  int64_t firstStep = -1;
  std::string stream;
  int64_t firstRealNs = 0;  // CLOCK_REALTIME of the first failure (0: unknown)
};

struct LibraryErrorRecord {
  std::string name;
  std::string error;
  uint64_t count = 0;
  int64_t firstNs = -1;
  int64_t firstStep = -1;
};

struct GpuPeak {
  int device = 0;
  uint64_t maxAllocated = 0;
  uint64_t maxReserved = 0;
  uint64_t total = 0;
};

struct ResourceRecord {
  std::string reason;  // step | failure | exit | launcher
  uint64_t maxRss = 0;
  uint64_t vmPeak = 0;
  uint64_t addressSpaceLimit = 0;  // 0 = unlimited
  uint64_t memoryLimit = 0;        // 0 = none / unknown
  uint64_t memTotal = 0;
  uint64_t oomKills = 0;
  std::vector<GpuPeak> gpus;
};

struct PackageRecord {
  std::string name;
  std::string version;
  std::string path;
};

// Where the failure sits in the job's own timeline (events of the failing stream, up to the
// failure, in the order they were written).
struct Timeline {
  int64_t stepsBegun = 0;
  int64_t stepsCompleted = 0;
  int64_t lastStepBegun = -1;
  int64_t lastStepEnded = -1;
  bool stepOpen = false;             // a step had begun and not ended
  bool byOptimizer = false;          // steps counted by optimizer.step() or backward() (no DataLoader)
  bool byBackward = false;           // of those, by backward() (no optimizer: updates by hand)
  bool byGradientCall = false;       // of those, by torch.func gradient calls (no backward() either)
  uint32_t trainingLoader = 0;       // loader of the last training step (DataLoader-driven steps)
  bool trainingLoaderEnded = false;  // its iterator ended after the last step
  bool evalBatchSeen = false;        // a non-training batch came after the last step began
  uint32_t evalLoader = 0;
  uint64_t evalBatch = 0;
  bool exiting = false;        // the failure came after the process began to exit
  int64_t firstStepNs = -1;    // tNs of the first StepBegin
  int64_t lastStepEndNs = -1;  // tNs of the last StepEnd before the failure
  int64_t endNs = -1;          // tNs of the failure (or of the last event when none)
  double lastLoss = 0;         // loss of the last completed step (NaN when none was seen)
  bool haveLoss = false;
  int64_t firstNonFiniteLossStep = -1;  // first completed step whose loss was NaN/Inf
  double lastFiniteLoss = 0;
  int64_t lastFiniteLossStep = -1;
  int64_t processStartRealNs = 0;  // CLOCK_REALTIME at the stream's start
  int64_t launchRealNs = 0;        // the trace's creation (dlrecord started)
};

struct TriageInput {
  std::optional<FailureRecord> failure;    // exception or signal, the first one
  std::optional<FailureRecord> nonfinite;  // the first non-finite value, if any
  std::optional<int> exitCode;             // the job's exit status (128+N: signal N)
  Timeline timeline;
  std::vector<MissingPathRecord> missingPaths;  // merged over streams, first failure first
  int64_t recordingEndRealNs = 0;               // CLOCK_REALTIME of the last event of any stream (0: none)
  uint64_t droppedPaths = 0;
  std::vector<LibraryErrorRecord> libraryErrors;
  std::optional<ResourceRecord> processPeak;   // the failing process's last resource peak
  std::optional<ResourceRecord> launcherPeak;  // the whole job's, from dlrecord
  std::vector<PackageRecord> packages;
  std::map<std::string, std::string> runtime;  // runtime info of the failing process
  std::map<std::string, std::string> env;      // the recorded environment (redacted)
  std::vector<std::string> command;
  std::string host;
  std::string user;
  uint32_t uid = 0;
  std::string stream;  // the stream the facts come from
  // Process streams that began a step (not ranks), counted when some of them updated parameters
  // in shared memory or did not say (several: Hogwild-style workers that may have raced).
  uint32_t trainingProcesses = 0;
  // Processes the job created that dlrr did not record ("pid 123 forked by native code ... in p100").
  std::vector<std::string> unrecordedProcesses;
  // For a non-finite failure: samples of that step's batch that hold NaN/Inf values
  // ("sample 5 (dataset index 1365): 3072 non-finite values in field 0").
  std::vector<std::string> batchFindings;
  // A distributed job whose ranks stopped meeting (format/Wavefront.h): the suspect rank(s).
  std::optional<HangFinding> hang;
};

}  // namespace dlrr::triage
