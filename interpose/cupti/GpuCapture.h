#pragma once
// Starts GPU capture through a CuptiApi: loads CUPTI, subscribes (one subscriber per process:
// if another tool holds it, capture stays off and says why), enables the launch and copy
// callbacks of both the driver and the runtime API (LaunchTracker de-duplicates them), and
// routes every callback to the decoder and the tracker. Start failures never reach the job:
// start() returns a one-line reason ("GPU capture off: <reason>" in dlrecord's summary).
#include <string>
#include <vector>

#include "interpose/cupti/CuptiApi.h"
#include "session/LaunchTracker.h"

namespace dlrr::cupti {

class GpuCapture {
 public:
  GpuCapture(CuptiApi& api, gpu::LaunchTracker& tracker) : api_(api), tracker_(tracker) {}
  ~GpuCapture() = default;  // callbacks stay subscribed: the process-wide instance never dies
  GpuCapture(const GpuCapture&) = delete;
  GpuCapture& operator=(const GpuCapture&) = delete;

  struct Status {
    bool ok = false;
    std::string message;             // why not, or what is on ("CUPTI 13.0.1 (path), 34 callbacks")
    std::vector<std::string> notes;  // callbacks this CUPTI does not know (older versions)
    int enabledLaunchCallbacks = 0;
    int enabledCopyCallbacks = 0;
  };
  // runtimeApi false: the driver API's callbacks alone (DLRR_CUPTI_RUNTIME=0). Every runtime
  // launch and copy reaches the driver, so each is still recorded once, by its driver call:
  // half the callbacks a launch (docs/gpu.md "Cost").
  Status start(bool runtimeApi = true);
  // Unsubscribes (tests; a real process keeps the subscription to the end).
  void stop();
  bool running() const { return subscribed_; }

  // Why cuptiSubscribe failed, in words.
  static std::string explain(CuptiApi& api, Result r, const std::string& otherSubscriber);

  // The callback CUPTI calls (userdata = this).
  static void callback(void* userdata, uint32_t domain, uint32_t cbid, const void* cbdata);

 private:
  CuptiApi& api_;
  gpu::LaunchTracker& tracker_;
  Subscriber subscriber_ = nullptr;
  bool subscribed_ = false;
};

}  // namespace dlrr::cupti
