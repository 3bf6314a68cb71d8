// ReplaySession's GPU checks: recorded kernel launches per step against the replayed ones
// (LaunchCompare), device digests compared like with like, and the report lines for both.
#include "replayer/ReplayReport.h"
#include "replayer/ReplaySession.h"

namespace dlrr {
namespace {

const char* algorithmName(int a) { return a == 0 ? "xxh3 (host)" : a == 1 ? "deviceSum (GPU)" : "unknown"; }

}  // namespace

void ReplaySession::loadGpuEvent(schema::Event::Reader e) {
  if (e.isInternedString()) {
    auto s = e.getInternedString();
    kernelNames_[s.getId()] = s.getText().cStr();
    return;
  }
  if (!e.isCudaLaunch()) return;
  auto c = e.getCudaLaunch();
  KernelLaunch l;
  l.seq = c.getSeq();
  l.nameId = c.getNameId();
  l.grid[0] = c.getGridX(), l.grid[1] = c.getGridY(), l.grid[2] = c.getGridZ();
  l.block[0] = c.getBlockX(), l.block[1] = c.getBlockY(), l.block[2] = c.getBlockZ();
  l.sharedMem = c.getSharedMem();
  l.device = c.getDevice();
  l.flags = c.getFlags();
  // Older traces (no flags): grid/block were set whenever known.
  if (!l.flags && (l.grid[0] || l.block[0])) l.flags = 8;
  recordedLaunches_[e.getStep()].push_back(std::move(l));
}

void ReplaySession::resolveKernelNames() {
  for (auto& [step, launches] : recordedLaunches_)
    for (auto& l : launches) {
      auto it = kernelNames_.find(l.nameId);
      l.name = it == kernelNames_.end() ? "<name " + std::to_string(l.nameId) + " missing>" : it->second;
    }
}

void ReplaySession::gpuCaptureOff(const std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  gpuCaptureKnown_ = true;
  gpuCaptureOff_ = why.empty() ? "unknown reason" : why;
  if (!recordedLaunches_.empty())
    warnings_.push_back("the recording has kernel launches, but GPU capture is off in this replay (" + gpuCaptureOff_ +
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
  std::lock_guard<std::mutex> lk(mu_);
  auto it = recordedLaunches_.find(step);
  return it == recordedLaunches_.end() ? std::vector<KernelLaunch>{} : it->second;
}

LaunchComparison ReplaySession::compareStepLaunches(int64_t step, bool complete) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto r = recordedLaunches_.find(step);
  auto p = replayedLaunches_.find(step);
  return compareLaunches(step, r == recordedLaunches_.end() ? std::vector<KernelLaunch>{} : r->second,
                         p == replayedLaunches_.end() ? std::vector<KernelLaunch>{} : p->second, complete);
}

void ReplaySession::checkLaunchesNow(const std::string& why) {
  if (StepObserver* o = observer_.load(std::memory_order_acquire)) o->flush();  // the launches so far
  std::lock_guard<std::mutex> lk(mu_);
  if (inStepNumber_ != INT64_MIN) checkLaunchesLocked(inStepNumber_, false, why);
}

void ReplaySession::checkLaunchesLocked(int64_t step, bool complete, const std::string& until) {
  // Only when this replay captures launches; a step is checked once (at its end, or at a stop
  // inside it).
  if (!gpuCaptureKnown_ || !gpuCaptureOff_.empty() || launchesChecked_.count(step)) return;
  auto rec = runtime_.find("gpu.capture");
  if (rec == runtime_.end() || rec->second.rfind("on", 0) != 0) return;  // nothing was captured to compare with
  auto r = recordedLaunches_.find(step);
  auto p = replayedLaunches_.find(step);
  if (r == recordedLaunches_.end() && p == replayedLaunches_.end()) return;
  launchesChecked_.insert(step);
  LaunchComparison c =
      compareLaunches(step, r == recordedLaunches_.end() ? std::vector<KernelLaunch>{} : r->second,
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
    warnings_.push_back("kernel launches differ from the recording at " + c.detail +
                        " (another GPU, driver or library build, or a nondeterministic algorithm choice such as "
                        "cudnn.benchmark)");
  }
}

int ReplaySession::incomparableLocked(int recordedAlgorithm, int algorithm) {
  if (incomparableDigests_++ == 0)
    warnings_.push_back(std::string("digests computed differently than recorded (recorded ") +
                        algorithmName(recordedAlgorithm) + ", here " + algorithmName(algorithm) +
                        "): the tensors moved between host and GPU; those digests are not checked");
  return 2;
}

int ReplaySession::checkDigestValues(int64_t step, int kind, const std::string& path, uint32_t callIndex,
                                     uint32_t output, int algorithm, const DigestResult& got) {
  return checkDigestAlgorithm(step, kind, path, callIndex, output, algorithm, got);
}

int ReplaySession::digestValues(int kind, const char* path, uint32_t callIndex, uint32_t output, const char* /*dtype*/,
                                int /*ndim*/, const int64_t* /*shape*/, int algorithm, const DigestResult& d) {
  return checkDigestValues(currentStep(), kind, path ? path : "", callIndex, output, algorithm, d);
}

void ReplaySession::writeGpuReport(ReplayReport& r) {
  // A text said twice keeps both, one a line (as the report always did).
  auto say = [](std::optional<std::string>& field, const std::string& v) { field = field ? *field + "\n" + v : v; };
  if (gpuCaptureKnown_) say(r.gpuCapture, gpuCaptureOff_.empty() ? "on" : "off: " + gpuCaptureOff_);
  auto rec = runtime_.find("gpu.capture");
  if (rec != runtime_.end() && rec->second.rfind("on", 0) != 0)
    say(r.gpuRecorded, rec->second + " (launch sequences not checked)");
  else if (!gpuCaptureKnown_ && !recordedLaunches_.empty())
    say(r.gpuCapture, "not started (CUDA not initialised in this replay); the recording has kernel launches");
  if (launchStepsChecked_ || launchDivergence_)
    r.launches = ReplayReport::Launches{launchStepsChecked_, launchStepsMatched_};
  if (launchDivergence_)
    r.launchDivergence = ReplayReport::LaunchDivergence{launchDivergenceStep_,
                                                        launchDivergence_->position ? *launchDivergence_->position : 0,
                                                        launchDivergence_->detail};
  if (!launchAtStop_.empty()) r.launchAtStop = launchAtStop_;
  r.incomparableDigests = incomparableDigests_;
}

}  // namespace dlrr
