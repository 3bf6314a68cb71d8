#pragma once
// Settings the launcher hands to the preloaded library through the environment. Parsed once
// at load; unknown or malformed values fall back to defaults (the job must run regardless).
#include <cstdint>
#include <string>

namespace dlrr {

enum class Mode { Off = 0, Record = 1, Replay = 2 };
// Process (-1): the native layer and the hook's process-wide parts only, no steps (docs/recording.md).
enum class CaptureLevel { Process = -1, Minimal = 0, Default = 1, Full = 2 };

// Set by the Python hook around multiprocessing's Process.start(): the child's identity, the
// order its parent created it in (see StreamHeader.processIdentity).
inline constexpr const char* kProcessIdEnv = "DLRR_PROCESS_ID";
// A DataLoader worker's identity starts so: it never trains, so never records or replays.
inline constexpr const char* kLoaderWorkerIdPrefix = "dataloader-worker:";
inline bool isTrainerIdentity(const char* id) {
  if (!id || !*id) return false;
  for (const char *p = id, *q = kLoaderWorkerIdPrefix; *q; ++p, ++q)
    if (*p != *q) return true;
  return false;
}

struct Config {
  Mode mode = Mode::Off;
  std::string traceDir;                          // DLRR_TRACE (absolute)
  CaptureLevel capture = CaptureLevel::Default;  // DLRR_CAPTURE=process|minimal|default|full
  int ringSteps = 2;                             // DLRR_RING_STEPS: steps of full tensors kept for a failure
  int statusFd = -1;                 // DLRR_STATUS_FD=FD:INODE: pipe to dlrecord for "what was not recorded"
  unsigned long long statusIno = 0;  // the pipe's inode: fd FD is used only while it is that pipe
  bool keepCollectives = false;      // DLRR_COLLECTIVES=full: every collective's results in the trace
  int window = 0;                    // DLRR_WINDOW: batches by reference, bytes of the last K held (0: all by value)
  uint64_t budget = 0;               // DLRR_BUDGET: bytes the whole trace may take (0: unbounded)
  std::string replayStream;          // DLRR_REPLAY_STREAM: stream to replay (replay mode)

  static Config fromEnvironment();
};

const char* captureLevelName(CaptureLevel c) noexcept;

}  // namespace dlrr
