// What differs between the recorded and the current environment and why it matters
// (impact per key), and the recorded job's paths checked on this machine.
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
namespace {

struct KeyRule {
  const char* prefix;  // exact key, or a prefix ending in '.'
  Impact impact;
  const char* why;
};

const std::vector<KeyRule>& rules() {
  static const std::vector<KeyRule> r = {
      {"python", Impact::Breaks,
       "another interpreter: other library builds, other hash and float-formatting details; bit-exact replay needs "
       "the recorded one, and code may not even parse (syntax errors are often a Python version mismatch)"},
      {"torch", Impact::Breaks, "other kernels and default algorithms: results differ bit for bit"},
      {"numpy", Impact::Matters,
       "numerical routines and the random streams of some distributions change between versions"},
      {"blas", Impact::Breaks, "another BLAS sums in another order: matmul results differ in the last bits"},
      {"torch.num_threads", Impact::Matters,
       "the intra-op thread count changes float results; dlreplay restores the recorded one, a plain rerun does not"},
      {"cuda.compiled", Impact::Breaks, "torch built against another CUDA: other kernels"},
      {"cuda.available", Impact::Breaks, "the job ran with a GPU and there is none here (or the reverse)"},
      {"cuda.device_count", Impact::Matters, "another number of GPUs: data-parallel jobs split work differently"},
      {"cuda.device.", Impact::Breaks, "another GPU model: other kernels, other memory size (GPU OOM may differ)"},
      {"cudnn.version", Impact::Breaks, "another cuDNN picks other convolution algorithms"},
      {"gpu.driver", Impact::Matters, "another driver: an older one may not run the recorded CUDA"},
      {"cpu.model", Impact::Matters, "another CPU takes other SIMD paths (AVX-512 vs AVX2): float results may differ"},
      {"cpu.count", Impact::Matters, "torch's default thread count follows the CPU count"},
      {"env.OMP_NUM_THREADS", Impact::Matters, "thread count of OpenMP/BLAS: changes float results and speed"},
      {"env.MKL_NUM_THREADS", Impact::Matters, "thread count of MKL: changes float results"},
      {"env.OPENBLAS_NUM_THREADS", Impact::Matters, "thread count of OpenBLAS: changes float results"},
      {"env.CUDA_VISIBLE_DEVICES", Impact::Matters, "which GPUs the job sees (and whether it sees any)"},
      {"env.PYTHONHASHSEED", Impact::Matters, "string hashing: set/dict iteration order of strings"},
      {"env.LD_LIBRARY_PATH", Impact::Matters,
       "which shared libraries load (CUDA, cuDNN, MKL): library-not-found failures"},
      {"env.LD_PRELOAD", Impact::Matters, "libraries forced into the process"},
      {"env.PYTHONPATH", Impact::Matters, "which modules import (and from where)"},
      {"env.PATH", Impact::Matters, "which programs run (python3, nvcc, the launcher's tools)"},
      {"env.LANG", Impact::Matters, "the default text encoding (UnicodeDecodeError under LANG=C)"},
      {"env.LC_ALL", Impact::Matters, "the default text encoding (UnicodeDecodeError under LC_ALL=C)"},
      {"env.LC_CTYPE", Impact::Matters, "the default text encoding"},
      {"env.PYTHONIOENCODING", Impact::Matters, "the encoding of stdin/stdout"},
      {"env.PYTHONUTF8", Impact::Matters, "UTF-8 mode: the default text encoding"},
      {"env.CUBLAS_WORKSPACE_CONFIG", Impact::Matters, "deterministic cuBLAS needs it"},
      {"env.PYTORCH_CUDA_ALLOC_CONF", Impact::Matters,
       "the CUDA caching allocator's behaviour (GPU OOM, fragmentation)"},
      {"env.NCCL_", Impact::Matters, "NCCL settings: transport, timeouts, algorithms"},
      {"env.HOME", Impact::Info, "where caches and user site-packages live"},
      {"env.", Impact::Info, ""},
      {"package.", Impact::Matters, "another version of a package the job imported"},
      {"kernel", Impact::Info, "another kernel"},
      {"host", Impact::Info, "another machine"},
      {"user", Impact::Info, "another user: file permissions and home directory differ"},
  };
  return r;
}

const KeyRule* ruleFor(const std::string& key) {
  for (const auto& r : rules()) {
    std::string p = r.prefix;
    if (key == p || (p.back() == '.' && key.rfind(p, 0) == 0) || (p.back() == '_' && key.rfind(p, 0) == 0)) return &r;
  }
  return nullptr;
}

}  // namespace

const char* impactId(Impact i) {
  switch (i) {
    case Impact::Breaks:
      return "breaks-replay";
    case Impact::Matters:
      return "matters";
    case Impact::Info:
      return "info";
  }
  return "info";
}

bool versionsAgree(const std::string& a, const std::string& b) {
  // PEP 440 in brief: the local part (+...) is not the release; numeric components compare
  // without leading zeros ("2022.09.24" is "2022.9.24").
  auto norm = [](const std::string& s) {
    std::string v = s.substr(0, s.find('+')), out, part;
    auto flush = [&] {
      bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
      if (digits) {
        size_t nz = part.find_first_not_of('0');
        part = nz == std::string::npos ? "0" : part.substr(nz);
      }
      out += part;
      part.clear();
    };
    for (char c : v) {
      if (c == '.') {
        flush();
        out += '.';
      } else {
        part += c;
      }
    }
    flush();
    return out;
  };
  return a == b || (!a.empty() && !b.empty() && norm(a) == norm(b));
}

std::vector<EnvDifference> diffEnvironments(const EnvFacts& recorded, const EnvFacts& current) {
  std::vector<EnvDifference> out;
  std::set<std::string> keys;
  for (const auto& [k, v] : recorded) keys.insert(k);
  for (const auto& [k, v] : current)
    if (recorded.count(k) || k.rfind("env.", 0) != 0) keys.insert(k);
  for (const auto& k : keys) {
    auto r = recorded.find(k);
    auto c = current.find(k);
    if (r == recorded.end()) {
      // Facts the recording did not have (e.g. CUDA queried here, not initialised there).
      if (k.rfind("cuda.", 0) == 0 || k == "cudnn.version" || k == "gpu.driver") {
        if (k == "gpu.driver" || (k == "cuda.available" && c->second == "1"))
          out.push_back({k, "<unknown>", c->second, Impact::Info, "not recorded (the job did not initialise CUDA)"});
      }
      continue;
    }
    if (c == current.end()) continue;  // not determined here
    std::string rv = r->second, cv = c->second;
    // Installed but without metadata (distutils from setuptools' shim on Python 3.12+): the
    // probe does not import the job's packages to read __version__, so the version here is
    // not determined either, which is no difference.
    if (k.rfind("package.", 0) == 0 && cv == "<installed, version unknown>") continue;
    if (rv == cv) continue;
    if ((k == "python" || k == "torch" || k == "numpy" || k.rfind("package.", 0) == 0) && versionsAgree(rv, cv))
      continue;
    if (k == "python" && cv.find('.') != std::string::npos && rv.rfind(cv + ".", 0) == 0)
      continue;  // "3.11" vs "3.11.2"
    if (k == "blas") {
      auto split = [](const std::string& s) {
        std::set<std::string> out;
        size_t start = 0;
        while (start <= s.size()) {
          size_t c = s.find(':', start);
          if (c == std::string::npos) c = s.size();
          if (c > start) out.insert(s.substr(start, c - start));
          start = c + 1;
        }
        return out;
      };
      if (split(rv) == split(cv)) continue;
    }
    if (rv == "<redacted>") continue;
    const KeyRule* rule = ruleFor(k);
    Impact impact = rule ? rule->impact : Impact::Info;
    std::string why = rule ? rule->why : "";
    if (k == "python" && rv.size() >= 4 && cv.size() >= 4) {
      // Only the patch level differs: it matters less.
      auto mm = [](const std::string& v) {
        auto d = v.find('.', v.find('.') + 1);
        return v.substr(0, d);
      };
      if (mm(rv) == mm(cv)) impact = Impact::Matters;
    }
    if (k.rfind("env.", 0) == 0 && why.empty()) continue;  // other variables: not worth a line
    out.push_back({k, rv, cv, impact, why});
  }
  std::stable_sort(out.begin(), out.end(), [](const EnvDifference& a, const EnvDifference& b) {
    return static_cast<int>(a.impact) < static_cast<int>(b.impact);
  });
  return out;
}

std::vector<EnvDifference> checkPaths(const RecordedEnvironment& rec, const TriageInput& facts) {
  std::vector<EnvDifference> out;
  if (!rec.cwd.empty() && !isDir(rec.cwd))
    out.push_back({"path.cwd", rec.cwd, "<missing>", Impact::Matters,
                   "the recorded working directory does not exist here: dlreplay cannot run the job there"});
  if (!rec.command.empty()) {
    std::string exe = onPath(rec.command[0]);
    if (exe.empty() || !exists(exe))
      out.push_back(
          {"path.command", rec.command[0], "<missing>", Impact::Matters, "the recorded program is not found here"});
    if (rec.command.size() > 1 && baseName(rec.command[0]).rfind("python", 0) == 0) {
      std::string script = rec.command[1];
      if (!script.empty() && script[0] != '-' && script.size() > 3 &&
          script.compare(script.size() - 3, 3, ".py") == 0) {
        std::string full = script[0] == '/' ? script : rec.cwd + "/" + script;
        if (!exists(full))
          out.push_back({"path.script", full, "<missing>", Impact::Matters, "the recorded script is not here"});
      }
    }
  }
  for (const auto& p : rec.processes) {
    if (p.packages.empty()) continue;
    for (const auto& pk : p.packages)
      if (!pk.path.empty() && pk.path[0] == '/' && !exists(pk.path))
        out.push_back({"path.package." + pk.name, pk.path, "<missing>", Impact::Matters,
                       "the job imported " + pk.name + " from here; this machine has no such path (another install?)"});
    break;
  }
  for (const auto& p : rec.processes) {
    for (const auto& [k, v] : p.runtime)
      if (k == "blas" && v != "<unset>") {
        size_t start = 0;
        while (start < v.size()) {
          size_t c = v.find(':', start);
          if (c == std::string::npos) c = v.size();
          std::string lib = v.substr(start, c - start);
          if (!lib.empty() && !exists(lib))
            out.push_back({"path.blas", lib, "<missing>", Impact::Breaks,
                           "the BLAS the job loaded is not here: another one computes matmul differently"});
          start = c + 1;
        }
      }
    if (!p.runtime.empty()) break;
  }
  // Paths the job missed or was denied: the failure may not repeat if they exist / open now.
  size_t shown = 0;
  std::set<std::string> seen;
  std::string named = facts.failure ? pathInMessage(facts.failure->message) : "";
  std::vector<const MissingPathRecord*> order;
  for (const auto& m : facts.missingPaths)
    if (!named.empty() && (m.path == named || (m.path.size() > named.size() &&
                                               m.path.compare(m.path.size() - named.size(), named.size(), named) == 0)))
      order.push_back(&m);
  for (const auto& m : facts.missingPaths) order.push_back(&m);
  for (const MissingPathRecord* m : order) {
    if (shown >= 10) break;
    if (isStartupProbe(m->path, m->op) || !seen.insert(m->path).second) continue;
    bool denied = m->error == EACCES || m->error == EPERM;
    if (m->error == ENOENT || m->error == ENOTDIR) {
      if (exists(m->path) && !bornDuring(m->path, m->firstRealNs, facts.recordingEndRealNs)) {
        out.push_back({"path.missing", m->path, "<exists>", Impact::Matters,
                       "the recorded job did not find this path; it exists here, so a rerun (or replay) may not fail "
                       "the same way"});
        ++shown;
      }
    } else if (denied) {
      int mode = m->op == 1 || m->op == 4 ? W_OK : R_OK;
      std::string target = m->op == 4 ? dirName(m->path) : m->path;
      if (exists(target) && ::access(target.c_str(), mode) == 0) {
        out.push_back({"path.denied", m->path, "<accessible>", Impact::Matters,
                       "the recorded job was denied this path; it is accessible here (to this user)"});
        ++shown;
      }
    }
  }
  for (const auto& l : facts.libraryErrors) {
    std::string found;
    if (l.name.find('/') != std::string::npos) {
      if (exists(l.name)) found = l.name;
    } else {
      std::vector<std::string> dirs;
      if (const char* ld = std::getenv("LD_LIBRARY_PATH")) {
        std::string s = ld;
        size_t start = 0;
        while (start <= s.size()) {
          size_t c = s.find(':', start);
          if (c == std::string::npos) c = s.size();
          if (c > start) dirs.push_back(s.substr(start, c - start));
          start = c + 1;
        }
      }
      for (const char* d : {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib",
                            "/usr/lib", "/usr/local/lib", "/usr/local/cuda/lib64"})
        dirs.push_back(d);
      for (const auto& d : dirs)
        if (exists(d + "/" + l.name)) {
          found = d + "/" + l.name;
          break;
        }
      if (found.empty()) {
        std::string cache = readFile("/etc/ld.so.cache", 8 << 20);
        std::string needle = std::string(1, '\0') + l.name + std::string(1, '\0');
        if (cache.find(needle) != std::string::npos) found = "(in the ld.so cache)";
      }
    }
    // Still not found here: it fails as it did, which is no difference (env-diff exits 0 then).
    if (found.empty()) continue;
    out.push_back({"library." + l.name, "failed to load", found, Impact::Matters,
                   "it loads here, so the failure may not repeat"});
  }
  return out;
}

}  // namespace dlrr::triage
