#include "interpose/cupti/GpuInjection.h"

#include <cstdlib>
#include <cstring>

namespace dlrr::cupti {

GpuInjection::GpuInjection(std::unique_ptr<CuptiApi> api, gpu::LaunchTracker::Options opts, bool drainThread)
    : api_(std::move(api)), tracker_(opts), capture_(*api_, tracker_), drainThread_(drainThread) {}

GpuInjection::~GpuInjection() {
  // Tests only (the process-wide instance is never destroyed): detach from the sessions first.
  capture_.stop();
  tracker_.disable();
  if (rec_) rec_->setStepObserver(nullptr);
  if (rep_) rep_->setStepObserver(nullptr);
  if (recorder_) recorder_->finish();
}

std::string GpuInjection::start(RecordSession* rec, ReplaySession* rep, const char* setting) {
  if (!status_.empty()) return status_;
  auto off = [&](const std::string& why) {
    status_ = "off: " + why;
    tracker_.disable();
    if (rec) {
      rec->runtimeInfo("gpu.capture", status_.c_str());
      rec->recorderStatus(false, ("GPU capture off: " + why).c_str());
    }
    if (rep) rep->gpuCaptureOff(why);
    return status_;
  };
  if (!rec && !rep) return off("this process is neither recorded nor replayed");
  if (setting && (!std::strcmp(setting, "0") || !std::strcmp(setting, "off") || !std::strcmp(setting, "no")))
    return off(std::string("turned off by DLRR_GPU_CAPTURE=") + setting);
  try {
    const char* runtime = std::getenv("DLRR_CUPTI_RUNTIME");
    GpuCapture::Status st = capture_.start(!(runtime && !std::strcmp(runtime, "0")));
    if (!st.ok) return off(st.message);
    status_ = "on: " + st.message;
    if (rec) {
      rec_ = rec;
      recorder_ = std::make_unique<GpuRecorder>(*rec, tracker_);
      if (drainThread_) recorder_->startDrainThread();
      rec->setStepObserver(recorder_.get());
      rec->runtimeInfo("gpu.capture", status_.c_str());
      for (const auto& n : st.notes) rec->note(("GPU capture: " + n).c_str());
    } else {
      rep_ = rep;
      replayer_ = std::make_unique<GpuReplayer>(*rep, tracker_);
      rep->setStepObserver(replayer_.get());
      rep->gpuCaptureOn();
    }
  } catch (const std::exception& e) {
    capture_.stop();
    return off(std::string("internal error: ") + e.what());
  } catch (...) {
    capture_.stop();
    return off("internal error");
  }
  return status_;
}

}  // namespace dlrr::cupti
