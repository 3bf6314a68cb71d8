#include "session/DistEnv.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "format/Redact.h"

extern char** environ;

namespace dlrr {
namespace {

int parseInt(const char* s, int fallback) {
  if (!s || !*s) return fallback;
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  if (*end != '\0' || v < 0 || v > 1 << 24) return fallback;  // ranks beyond 16M are not real
  return static_cast<int>(v);
}

const char* stdGetenv(const char* name) { return std::getenv(name); }

}  // namespace

bool isDistVariable(const std::string& name) {
  static const char* const exact[] = {"RANK",
                                      "LOCAL_RANK",
                                      "WORLD_SIZE",
                                      "LOCAL_WORLD_SIZE",
                                      "GROUP_RANK",
                                      "GROUP_WORLD_SIZE",
                                      "ROLE_RANK",
                                      "ROLE_NAME",
                                      "ROLE_WORLD_SIZE",
                                      "MASTER_ADDR",
                                      "MASTER_PORT",
                                      "OMP_NUM_THREADS",
                                      "CUDA_VISIBLE_DEVICES"};
  for (const char* e : exact)
    if (name == e) return true;
  for (const char* prefix : {"TORCHELASTIC_", "NCCL_", "GLOO_"})
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

DistEnv DistEnv::fromEnvironment(const char* (*get)(const char*)) {
  if (!get) get = stdGetenv;
  DistEnv d;
  d.rank = parseInt(get("RANK"), -1);
  d.localRank = parseInt(get("LOCAL_RANK"), -1);
  d.worldSize = parseInt(get("WORLD_SIZE"), 0);
  d.restartCount = parseInt(get("TORCHELASTIC_RESTART_COUNT"), 0);
  if (const char* r = get("TORCHELASTIC_RUN_ID")) d.runId = r;
  if (d.worldSize > 0 && d.rank >= d.worldSize) d.rank = -1;  // inconsistent: not a rank we can name
  if (get == stdGetenv) {
    for (char** e = environ; e && *e; ++e) {
      const char* eq = std::strchr(*e, '=');
      if (!eq) continue;
      std::string k(*e, static_cast<size_t>(eq - *e));
      // Secret-looking names stay out (an NCCL_/GLOO_ variable may carry a credential).
      if (isDistVariable(k)) d.vars.emplace_back(k, isSecretName(k, defaultRedactPatterns()) ? kRedacted : eq + 1);
    }
    std::sort(d.vars.begin(), d.vars.end());
  }
  return d;
}

std::string rankStreamBase(const DistEnv& d) {
  if (!d.isRank()) return "";
  std::string base = "rank" + std::to_string(d.rank);
  if (d.restartCount > 0) base += ".restart" + std::to_string(d.restartCount);
  return base;
}

}  // namespace dlrr
