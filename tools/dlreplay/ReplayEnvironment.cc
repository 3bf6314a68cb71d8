#include "tools/dlreplay/ReplayEnvironment.h"

#include <filesystem>
#include <set>
#include <system_error>

#include "format/Redact.h"
#include "replayer/ReplaySession.h"

namespace dlrr {

bool executionVariable(const std::string& name) {
  return name.rfind("LD_", 0) == 0 || name.rfind("PYTHON", 0) == 0 || name == "PATH";
}

Environment recordedEnvironment(schema::TraceInfo::Reader recorded, const InstallPaths& paths, const EnvLookup& ours,
                                std::string& note, bool trusted, std::vector<std::string>* withheld) {
  Environment env;
  std::set<std::string> redacted;
  for (auto n : recorded.getRedactedNames()) redacted.insert(n.cStr());
  for (auto kv : recorded.getEnv()) {
    std::string k = kv.getKey().cStr();
    bool withhold = !trusted && executionVariable(k);
    if (withhold && withheld) withheld->push_back(k);
    if (redacted.count(k) || withhold) {
      if (const char* mine = ours(k.c_str())) env[k] = mine;
      continue;
    }
    env[k] = kv.getValue().cStr();
  }
  for (const char* k : {"TERM", "DISPLAY", "COLUMNS", "LINES"})  // the terminal is ours now
    if (const char* v = ours(k)) env[k] = v;
  auto prepend = [&](const std::string& var, const std::string& first) {
    auto it = env.find(var);
    env[var] = it != env.end() && !it->second.empty() ? first + ":" + it->second : first;
  };
  prepend("LD_PRELOAD", paths.library);
  prepend("PYTHONPATH", paths.pythonHook);
  // GPU capture (docs/gpu.md): CUDA calls our InitializeInjection; a library the recording's
  // environment configured is kept (and launch sequences are then not checked).
  auto it = env.find("CUDA_INJECTION64_PATH");
  std::error_code ec;
  if (it == env.end() || it->second.empty() || std::filesystem::equivalent(it->second, paths.library, ec))
    env["CUDA_INJECTION64_PATH"] = paths.library;
  else
    note = "GPU capture off: another injection library is configured (CUDA_INJECTION64_PATH=" + it->second + ")";
  return env;
}

void applyReplaySettings(Environment& env, const ReplaySettings& s) {
  auto setOrErase = [&](const char* k, bool set, const std::string& v) {
    if (set)
      env[k] = v;
    else
      env.erase(k);
  };
  env["DLRR_MODE"] = "replay";
  env["DLRR_TRACE"] = s.trace;
  env["DLRR_REPLAY_STREAM"] = s.stream;
  env.erase("DLRR_DIST_REPLAY");
  if (s.rankAlone) {
    for (const auto& [k, v] : s.rankEnv)
      if (v != kRedacted) env[k] = v;
    env["DLRR_DIST_REPLAY"] = "alone";
  } else if (s.allRanks) {
    env["DLRR_DIST_REPLAY"] = "all";
  }
  env["DLRR_UNTIL"] = s.until;
  env["DLRR_REPORT"] = s.reportPath;
  setOrErase("DLRR_JUMP_STEP", s.jumpStep >= 0, std::to_string(s.jumpStep));
  env["DLRR_LIBRARY"] = s.library;
  setOrErase("DLRR_DEBUG", !s.debug.empty(), s.debug);
  setOrErase("DLRR_PROGRESS", s.progress, "1");
  setOrErase("DLRR_DATA", s.withoutData, "absent");
  setOrErase("DLRR_WHAT_IF", !s.whatIf.empty(), s.whatIf);
  setOrErase("DLRR_WHAT_IF_FROM", !s.whatIf.empty(), std::to_string(s.whatIfFrom));
  setOrErase("DLRR_WHAT_IF_STEPS", !s.whatIf.empty() && s.whatIfSteps > 0, std::to_string(s.whatIfSteps));
  env.erase("DLRR_STATUS_FD");  // a recording's status pipe: not ours
}

std::vector<std::string> environmentStrings(const Environment& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

}  // namespace dlrr
