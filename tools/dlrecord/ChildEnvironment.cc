#include "tools/dlrecord/ChildEnvironment.h"

#include <filesystem>
#include <system_error>

extern char** environ;

namespace dlrr {
namespace {

const std::string* valueOf(const std::vector<std::string>& env, const std::string& key) {
  for (const auto& kv : env)
    if (kv.size() > key.size() && kv[key.size()] == '=' && kv.compare(0, key.size(), key) == 0) return &kv;
  return nullptr;
}

std::string prepended(const std::vector<std::string>& ours, const std::string& var, const std::string& first) {
  const std::string* kv = valueOf(ours, var);
  std::string old = kv ? kv->substr(var.size() + 1) : "";
  return var + "=" + (old.empty() ? first : first + ":" + old);
}

}  // namespace

std::vector<std::string> childEnvironment(const std::vector<std::string>& ours, const RecordOptions& o,
                                          const std::string& trace, const InstallPaths& paths,
                                          const std::string& statusFd, std::string& gpuOff) {
  static const char* const kOwn[] = {"LD_PRELOAD=",   "PYTHONPATH=",          "DLRR_MODE=",       "DLRR_TRACE=",
                                     "DLRR_CAPTURE=", "DLRR_COLLECTIVES=",    "DLRR_RING_STEPS=", "DLRR_STATUS_FD=",
                                     "DLRR_LIBRARY=", "DLRR_SNAPSHOT_EVERY=", "DLRR_HANG_AFTER=", "DLRR_WINDOW="};
  auto own = [](const std::string& kv) {
    for (const char* k : kOwn)
      if (kv.rfind(k, 0) == 0) return true;
    return false;
  };
  std::vector<std::string> env;
  for (const auto& kv : ours)
    if (!own(kv)) env.push_back(kv);
  // CUDA loads the library named by CUDA_INJECTION64_PATH at driver initialisation and calls its
  // InitializeInjection. A library the user configured is kept, and GPU capture is then off.
  gpuOff.clear();
  const std::string* theirs = valueOf(ours, "CUDA_INJECTION64_PATH");
  std::string theirPath = theirs ? theirs->substr(sizeof "CUDA_INJECTION64_PATH") : "";
  std::error_code ec;
  if (!theirPath.empty() && theirPath != paths.library && !std::filesystem::equivalent(paths.library, theirPath, ec)) {
    gpuOff = "another injection library is configured (CUDA_INJECTION64_PATH=" + theirPath + "); it is kept";
  } else {
    std::erase_if(env, [](const std::string& kv) { return kv.rfind("CUDA_INJECTION64_PATH=", 0) == 0; });
    env.push_back("CUDA_INJECTION64_PATH=" + paths.library);
  }
  env.push_back(prepended(ours, "LD_PRELOAD", paths.library));
  env.push_back(prepended(ours, "PYTHONPATH", paths.pythonHook));
  env.push_back("DLRR_MODE=record");
  env.push_back("DLRR_TRACE=" + trace);
  env.push_back("DLRR_CAPTURE=" + o.capture);
  env.push_back("DLRR_RING_STEPS=" + std::to_string(o.ringSteps));
  env.push_back("DLRR_COLLECTIVES=" + o.collectives);
  env.push_back("DLRR_LIBRARY=" + paths.library);
  env.push_back("DLRR_SNAPSHOT_EVERY=" + o.snapshotEvery);
  env.push_back("DLRR_HANG_AFTER=" + o.hangAfter);
  // Batches by reference with a window of K steps; 0 (--batches all): every batch by value.
  env.push_back("DLRR_WINDOW=" + std::to_string(o.batches == "window" ? o.window : 0));
  env.push_back("DLRR_BUDGET=" + std::to_string(o.budget));  // bytes; the library and snapshots.py
  if (!statusFd.empty()) env.push_back("DLRR_STATUS_FD=" + statusFd);
  return env;
}

std::vector<std::string> processEnvironment() {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  return env;
}

}  // namespace dlrr
