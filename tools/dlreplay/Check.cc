#include "tools/dlreplay/Check.h"

#include <sys/wait.h>

#include <algorithm>

#include "tools/common/Text.h"
#include "tools/dlreplay/ReplayOutcome.h"
#include "triage/Environment.h"

namespace dlrr::replaycheck {

std::vector<std::string> preflightWarnings(Trace& trace, const triage::TriageInput& facts, size_t max) {
  std::vector<std::string> out;
  triage::RecordedEnvironment rec = triage::recordedEnvironment(trace, facts);
  triage::ProbeOptions opt;
  opt.runPython = false;
  std::vector<std::string> notes;
  triage::EnvFacts cur = triage::currentEnvironment(rec, opt, notes);
  auto diffs = triage::diffEnvironments(rec.facts, cur);
  auto paths = triage::checkPaths(rec, facts);
  diffs.insert(diffs.end(), paths.begin(), paths.end());
  for (const auto& d : diffs) {
    if (out.size() >= max) break;
    // Replay restores the recorded variables and thread counts; the working directory is
    // checked by dlreplay itself; host, user, kernel are not worth a warning.
    if (d.key.rfind("env.", 0) == 0 || d.key == "torch.num_threads" || d.key == "cpu.count" || d.key == "path.cwd" ||
        d.impact == triage::Impact::Info)
      continue;
    std::string line = d.key + " differs: recorded " + d.recorded + ", here " + d.current;
    if (d.key.rfind("path.", 0) == 0 || d.key.rfind("library.", 0) == 0)
      line = d.key.substr(d.key.find('.') + 1) + ": " + d.recorded + " -> " + d.current;
    if (!d.why.empty()) line += " (" + d.why + ")";
    out.push_back(line);
  }
  return out;
}

std::string stepPhrase(const std::string& stopStep, const triage::TriageInput& facts) {
  if (!stopStep.empty() && stopStep != "-") return "at step " + stopStep;
  if (facts.timeline.stepsBegun == 0) return "during initialisation (before the first step)";
  if (facts.timeline.stepOpen) return "at step " + std::to_string(facts.timeline.lastStepBegun);
  if (facts.failure && facts.failure->step >= 0) return "after step " + std::to_string(facts.failure->step);
  return "before the first step";
}

CheckVerdict decideCheck(const CheckInput& in, const triage::TriageInput& facts) {
  constexpr size_t kSummaryTextMax = 300;
  CheckVerdict v;
  v.exitCode = in.replayExit;
  const int st = in.waitStatus;
  int childStatus = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
  if (in.checkExit)
    v.reproduced = in.replayExit == kExitOk && facts.exitCode && childStatus == *facts.exitCode;
  else
    v.reproduced = in.replayExit == kExitOk;
  std::string what = !in.recordedFailure.empty() ? tools::printableSummary(in.recordedFailure, kSummaryTextMax)
                                                 : "exit status " + std::to_string(facts.exitCode.value_or(-1));
  if (v.reproduced) {
    std::string stopStep = in.report.stopStep.value_or("");
    if (in.checkExit)  // the last verified step: verified steps are consecutive from the jump step
      stopStep = in.report.verifiedSteps > 0
                     ? std::to_string(std::max<int64_t>(in.jumpStep, 0) + in.report.verifiedSteps - 1)
                     : "";
    v.text = "reproduced " + stepPhrase(stopStep, facts) + " (" + what + ")";
    // This stream reproduced it; with racing trainers or unrecorded processes the job as a
    // whole is not shown deterministic by that.
    v.text = in.concurrencyCaveat.empty() ? "deterministic: " + v.text : v.text + "; " + in.concurrencyCaveat;
    return v;
  }
  std::string why = in.checkExit && in.replayExit == kExitOk
                        ? "the replayed job ended with status " + std::to_string(childStatus) +
                              ", the recording with " + std::to_string(facts.exitCode.value_or(-1))
                        : in.replayMessage;
  v.text = "not reproduced: " + why;
  if (in.jumpStep >= 0 && in.replayExit != kExitNoReplay && !in.nonDeterministic)  // else the message says why
    v.text += "; from the snapshot of step " + std::to_string(in.jumpStep) +
              ", on the same build: a transient fault (a hardware check is advised) unless state the snapshot "
              "cannot hold changed the result (--check --from start replays every step)";
  if (in.replayExit != kExitNoReplay) v.exitCode = kExitNotReproduced;
  return v;
}

}  // namespace dlrr::replaycheck
