// The environment a trace recorded: the launcher's header (command, host, user, environment,
// options) and each process's runtime facts and packages, flattened for comparison.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "triage/Classifier.h"
#include "triage/Environment.h"
#include "triage/EnvironmentDetail.h"

namespace dlrr::triage {
using namespace detail;

const std::vector<std::string>& comparedEnvVars() {
  static const std::vector<std::string> v = {"OMP_NUM_THREADS",
                                             "MKL_NUM_THREADS",
                                             "OPENBLAS_NUM_THREADS",
                                             "CUDA_VISIBLE_DEVICES",
                                             "PYTHONHASHSEED",
                                             "LD_LIBRARY_PATH",
                                             "LD_PRELOAD",
                                             "PYTHONPATH",
                                             "PATH",
                                             "LANG",
                                             "LC_ALL",
                                             "LC_CTYPE",
                                             "PYTHONIOENCODING",
                                             "PYTHONUTF8",
                                             "CUBLAS_WORKSPACE_CONFIG",
                                             "PYTORCH_CUDA_ALLOC_CONF",
                                             "HOME"};
  return v;
}

namespace {

void readLauncher(Trace& trace, RecordedEnvironment& r) {
  if (StreamReader* l = trace.launcher()) {
    auto ti = l->header().getTrace();
    r.host = str(ti.getHost());
    r.user = str(ti.getUser());
    r.uid = ti.getUid();
    r.cwd = str(ti.getCwd());
    r.cpuModel = str(ti.getCpuModel());
    r.cpuCount = ti.getCpuCount();
    r.kernel = str(ti.getKernel());
    r.captureMode = str(ti.getCaptureMode());
    r.createdNs = ti.getCreatedNs();
    for (auto a : ti.getCommand()) r.command.push_back(str(a));
    for (auto kv : ti.getEnv()) r.env.emplace_back(str(kv.getKey()), str(kv.getValue()));
    for (auto n : ti.getRedactedNames()) r.redactedNames.push_back(str(n));
    for (auto kv : ti.getOptions()) r.options.emplace_back(str(kv.getKey()), str(kv.getValue()));
  }
}

void flatten(RecordedEnvironment& r);

}  // namespace

RecordedEnvironment recordedEnvironment(Trace& trace, const TriageInput& facts) {
  RecordedEnvironment r;
  readLauncher(trace, r);
  ProcessEnvironment p;
  p.stream = facts.stream;
  if (StreamReader* s = trace.find(facts.stream))
    for (auto a : s->header().getArgv()) p.argv.push_back(str(a));
  for (const auto& [k, v] : facts.runtime) p.runtime.emplace_back(k, v);
  p.packages = facts.packages;
  if (facts.processPeak) p.peaks.push_back(*facts.processPeak);
  r.processes.push_back(std::move(p));
  flatten(r);
  return r;
}

RecordedEnvironment recordedEnvironment(Trace& trace) {
  RecordedEnvironment r;
  readLauncher(trace, r);
  StreamReader* mainStream = trace.mainStream();
  std::vector<StreamReader*> order;
  if (mainStream) order.push_back(mainStream);
  for (auto& s : trace.streams())
    if (s.get() != mainStream && s->header().getRole() == schema::StreamHeader::Role::PROCESS) order.push_back(s.get());
  for (StreamReader* s : order) {
    ProcessEnvironment p;
    p.stream = s->name();
    for (auto a : s->header().getArgv()) p.argv.push_back(str(a));
    try {
      s->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
        if (e.isRuntimeInfo())
          for (auto kv : e.getRuntimeInfo().getItems()) p.runtime.emplace_back(str(kv.getKey()), str(kv.getValue()));
        if (e.isPackages()) {
          p.packages.clear();
          for (auto it : e.getPackages().getItems())
            p.packages.push_back({str(it.getName()), str(it.getVersion()), str(it.getPath())});
        }
        if (e.isResourcePeak()) {
          auto rp = e.getResourcePeak();
          ResourceRecord rr;
          rr.reason = str(rp.getReason());
          rr.maxRss = rp.getMaxRssBytes();
          rr.vmPeak = rp.getVmPeakBytes();
          rr.addressSpaceLimit = rp.getAddressSpaceLimit();
          rr.memoryLimit = rp.getMemoryLimit();
          rr.memTotal = rp.getMemTotal();
          rr.oomKills = rp.getOomKills();
          for (auto g : rp.getGpus())
            rr.gpus.push_back({g.getDevice(), g.getMaxAllocated(), g.getMaxReserved(), g.getTotal()});
          p.peaks.push_back(rr);
        }
      });
    } catch (const TraceError&) {  // best effort: damage: the peaks read before it are what we have
    }
    if (p.runtime.empty() && p.packages.empty() && p.peaks.empty() && s != mainStream) continue;
    r.processes.push_back(std::move(p));
  }
  flatten(r);
  return r;
}

namespace {

void flatten(RecordedEnvironment& r) {
  EnvFacts& f = r.facts;
  if (!r.host.empty()) f["host"] = r.host;
  if (!r.user.empty()) f["user"] = r.user;
  if (!r.kernel.empty()) f["kernel"] = r.kernel;
  if (!r.cpuModel.empty()) f["cpu.model"] = r.cpuModel;
  if (r.cpuCount) f["cpu.count"] = std::to_string(r.cpuCount);
  std::map<std::string, std::string> env(r.env.begin(), r.env.end());
  if (!r.env.empty())
    for (const auto& k : comparedEnvVars()) {
      auto it = env.find(k);
      f["env." + k] = it == env.end() ? "<unset>" : it->second;
    }
  for (const auto& [k, v] : env)
    if (k.rfind("NCCL_", 0) == 0) f["env." + k] = v;
  // Runtime facts: the first process that has them (the main one when it does).
  static const std::set<std::string> keys = {"python",
                                             "torch",
                                             "numpy",
                                             "blas",
                                             "torch.num_threads",
                                             "cuda.compiled",
                                             "cuda.available",
                                             "cuda.device_count",
                                             "cudnn.version"};
  for (const auto& p : r.processes) {
    if (p.runtime.empty()) continue;
    for (const auto& [k, v] : p.runtime)
      if (keys.count(k) || (k.rfind("cuda.device.", 0) == 0 && k.find('.', 12) == std::string::npos)) f[k] = v;
    break;
  }
  for (const auto& p : r.processes) {
    if (p.packages.empty()) continue;
    for (const auto& pk : p.packages)
      if (pk.name != "torch" && pk.name != "numpy" && !pk.version.empty()) f["package." + pk.name] = pk.version;
    if (!f.count("torch"))
      for (const auto& pk : p.packages)
        if (pk.name == "torch" && !pk.version.empty()) f["torch"] = pk.version;
    if (!f.count("numpy"))
      for (const auto& pk : p.packages)
        if (pk.name == "numpy" && !pk.version.empty()) f["numpy"] = pk.version;
    break;
  }
}

}  // namespace

}  // namespace dlrr::triage
