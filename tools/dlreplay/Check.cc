#include "tools/dlreplay/Check.h"

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

}  // namespace dlrr::replaycheck
