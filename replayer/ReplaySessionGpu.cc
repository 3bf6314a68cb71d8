// ReplaySession's GPU checks: recorded kernel launches per step against the replayed ones
// (LaunchCompare), and the report lines for them. Device digests are compared like with like
// by the ReplayVerifier.
#include "replayer/ReplayReport.h"
#include "replayer/ReplaySession.h"

namespace dlrr {

void ReplaySession::gpuCaptureOff(const std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  gpuCaptureKnown_ = true;
  gpuCaptureOff_ = why.empty() ? "unknown reason" : why;
  if (index_ && index_->hasLaunches())
    report_.warn("the recording has kernel launches, but GPU capture is off in this replay (" + gpuCaptureOff_ +
                 "): launch sequences are not checked");
}

void ReplaySession::gpuCaptureOn() {
  std::lock_guard<std::mutex> lk(mu_);
  gpuCaptureKnown_ = true;
  gpuCaptureOff_.clear();
}

void ReplaySession::addReplayedLaunches(int64_t step, std::vector<KernelLaunch> launches) {
  std::lock_guard<std::mutex> lk(mu_);
  auto& v = replayedLaunches_[step];
  for (auto& l : launches) v.push_back(std::move(l));
}

std::vector<KernelLaunch> ReplaySession::recordedLaunches(int64_t step) const {
  const std::vector<KernelLaunch>* r = index_ ? index_->launches(step) : nullptr;
  return r ? *r : std::vector<KernelLaunch>{};
}

LaunchComparison ReplaySession::compareStepLaunches(int64_t step, bool complete) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto p = replayedLaunches_.find(step);
  return compareLaunches(step, recordedLaunches(step),
                         p == replayedLaunches_.end() ? std::vector<KernelLaunch>{} : p->second, complete);
}

void ReplaySession::checkLaunchesNow(const std::string& why) {
  if (StepObserver* o = observer_.load(std::memory_order_acquire)) o->flush();  // the launches so far
  std::lock_guard<std::mutex> lk(mu_);
  int64_t open = verifier_->openStep();
  if (open != INT64_MIN) checkLaunchesLocked(open, false, why);
}

void ReplaySession::checkLaunchesLocked(int64_t step, bool complete, const std::string& until) {
  // Only when this replay captures launches; a step is checked once (at its end, or at a stop
  // inside it).
  if (!index_ || !gpuCaptureKnown_ || !gpuCaptureOff_.empty() || launchesChecked_.count(step)) return;
  const char* rec = index_->runtimeInfo("gpu.capture");
  if (!rec || std::string_view(rec).rfind("on", 0) != 0) return;  // nothing was captured to compare with
  const std::vector<KernelLaunch>* r = index_->launches(step);
  auto p = replayedLaunches_.find(step);
  if (!r && p == replayedLaunches_.end()) return;
  launchesChecked_.insert(step);
  LaunchComparison c =
      compareLaunches(step, r ? *r : std::vector<KernelLaunch>{},
                      p == replayedLaunches_.end() ? std::vector<KernelLaunch>{} : p->second, complete);
  replayedLaunches_.erase(step);  // checked: keep memory flat over long replays
  if (complete) {
    ++launchStepsChecked_;
    if (c.match) ++launchStepsMatched_;
  } else if (c.match) {
    launchAtStop_ = "step " + std::to_string(step) + ": the " + std::to_string(c.compared) + " launches replayed " +
                    until + " match the recording (of " + std::to_string(c.recorded) + " recorded in the step)" +
                    (c.truncated ? "; records were lost past that point" : "");
  }
  if (!c.match && !launchDivergence_) {
    launchDivergence_ = c;
    launchDivergenceStep_ = step;
    report_.warn("kernel launches differ from the recording at " + c.detail +
                 " (another GPU, driver or library build, or a nondeterministic algorithm choice such as "
                 "cudnn.benchmark)");
  }
}

void ReplaySession::gpuFigures(ReplayReport& r) const {
  if (gpuCaptureKnown_) r.gpuCapture = gpuCaptureOff_.empty() ? "on" : "off: " + gpuCaptureOff_;
  const char* rec = index_ ? index_->runtimeInfo("gpu.capture") : nullptr;
  if (rec && std::string_view(rec).rfind("on", 0) != 0)
    r.gpuRecorded = std::string(rec) + " (launch sequences not checked)";
  else if (!gpuCaptureKnown_ && index_ && index_->hasLaunches())
    r.gpuCapture = "not started (CUDA not initialised in this replay); the recording has kernel launches";
  if (launchStepsChecked_ || launchDivergence_)
    r.launches = ReplayReport::Launches{launchStepsChecked_, launchStepsMatched_};
  if (launchDivergence_)
    r.launchDivergence = ReplayReport::LaunchDivergence{launchDivergenceStep_,
                                                        launchDivergence_->position ? *launchDivergence_->position : 0,
                                                        launchDivergence_->detail};
  if (!launchAtStop_.empty()) r.launchAtStop = launchAtStop_;
}

}  // namespace dlrr
