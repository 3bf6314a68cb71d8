#pragma once
// What InitializeInjection does, as a testable object: starts GPU capture through a CuptiApi
// (the real one in libdlrr.so, a fake in tests) and connects it to the process's recorder
// (GpuRecorder: events into the trace) or replayer (GpuReplayer: launch sequences checked).
// When capture cannot start, recording goes on without it and says why: a RecorderStatus
// event, the status pipe (dlrecord prints "GPU capture off: <why>"), RuntimeInfo gpu.capture;
// in replay, the report's gpu.capture line.
#include <memory>
#include <string>

#include "interpose/cupti/CuptiApi.h"
#include "interpose/cupti/GpuCapture.h"
#include "recorder/GpuRecorder.h"
#include "replayer/GpuReplayer.h"
#include "session/LaunchTracker.h"

namespace dlrr::cupti {

class GpuInjection {
 public:
  explicit GpuInjection(std::unique_ptr<CuptiApi> api, gpu::LaunchTracker::Options opts = {}, bool drainThread = true);
  ~GpuInjection();
  GpuInjection(const GpuInjection&) = delete;
  GpuInjection& operator=(const GpuInjection&) = delete;

  // rec or rep (the other null). setting: DLRR_GPU_CAPTURE ("0"/"off"/"no" turn it off).
  // Returns "on: ..." or "off: <why>"; idempotent (the first result sticks).
  std::string start(RecordSession* rec, ReplaySession* rep, const char* setting);
  const std::string& status() const { return status_; }

  CuptiApi& api() { return *api_; }
  gpu::LaunchTracker& tracker() { return tracker_; }
  GpuRecorder* recorder() { return recorder_.get(); }
  GpuReplayer* replayer() { return replayer_.get(); }
  GpuCapture& capture() { return capture_; }

 private:
  std::unique_ptr<CuptiApi> api_;
  gpu::LaunchTracker tracker_;
  GpuCapture capture_;
  bool drainThread_;
  std::unique_ptr<GpuRecorder> recorder_;
  std::unique_ptr<GpuReplayer> replayer_;
  RecordSession* rec_ = nullptr;
  ReplaySession* rep_ = nullptr;
  std::string status_;
};

}  // namespace dlrr::cupti
