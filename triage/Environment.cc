#include "triage/Environment.h"

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

#include <cerrno>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "triage/Classifier.h"

extern char** environ;

namespace dlrr::triage {
namespace {

std::string str(capnp::Text::Reader t) { return std::string(t.begin(), t.size()); }

bool exists(const std::string& p) {
  struct stat st {};
  return !p.empty() && ::stat(p.c_str(), &st) == 0;
}

bool isDir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string readFile(const std::string& path, size_t cap = 1 << 20) {
  std::ifstream in(path, std::ios::binary);
  std::string out;
  if (!in) return out;
  out.resize(cap);
  in.read(out.data(), static_cast<std::streamsize>(cap));
  out.resize(static_cast<size_t>(in.gcount()));
  return out;
}

std::string dirName(const std::string& p) {
  auto s = p.rfind('/');
  return s == std::string::npos ? "." : s == 0 ? "/" : p.substr(0, s);
}

std::string baseName(const std::string& p) {
  auto s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto c = line.find(':');
      return c == std::string::npos ? line : line.substr(c + 2);
    }
  return "";
}

// "python3" on PATH -> "/usr/bin/python3"; paths are returned as they are.
std::string onPath(const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t colon = p.find(':', start);
    if (colon == std::string::npos) colon = p.size();
    std::string dir = p.substr(start, colon - start);
    std::string cand = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(cand.c_str(), X_OK) == 0) return cand;
    start = colon + 1;
  }
  return "";
}

std::string realPath(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : p;
}

// "python3.11" -> "3.11"; "" when the name says nothing.
std::string versionFromName(const std::string& exe) {
  std::string b = baseName(exe);
  if (b.rfind("python", 0) != 0) return "";
  std::string v = b.substr(6);
  if (v.empty() || v.find('.') == std::string::npos) return "";
  for (char c : v)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.')) return "";
  return v;
}

// Lower-cased, '-' and '_' equal: distribution names vs module names.
std::string normName(const std::string& s) {
  std::string o;
  for (char c : s) o += c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

// Version of `module` installed in `siteDir`, from NAME-VERSION.dist-info / .egg-info there.
std::string distVersion(const std::string& siteDir, const std::string& module) {
  DIR* d = ::opendir(siteDir.c_str());
  if (!d) return "";
  std::string want = normName(module) + "_";  // name, then '-' (normalised to '_'), then version
  std::string found;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    std::string suffix;
    for (const char* s : {".dist-info", ".egg-info"})
      if (n.size() > std::strlen(s) && n.compare(n.size() - std::strlen(s), std::strlen(s), s) == 0) suffix = s;
    if (suffix.empty()) continue;
    std::string stem = n.substr(0, n.size() - suffix.size());
    auto dash = stem.find('-');
    if (dash == std::string::npos) continue;
    if (normName(stem.substr(0, dash)) + "_" != want) continue;
    std::string v = stem.substr(dash + 1);
    auto pyTag = v.find("-py");  // NAME-VERSION-py3.11.egg-info
    if (pyTag != std::string::npos) v = v.substr(0, pyTag);
    found = v;
    break;
  }
  ::closedir(d);
  return found;
}

std::string torchVersionFile(const std::string& pkgDir) {
  return versionAssigned(readFile(pkgDir + "/version.py", 1 << 16));
}

// Runs argv with a timeout; stdout in `out`. Returns the exit status, -1 on failure to run.
int runCapture(const std::vector<std::string>& argv, int timeoutSeconds, std::string& out) {
  int pipeFd[2];
  if (::pipe2(pipeFd, O_CLOEXEC) != 0) return -1;
  std::vector<std::string> envStrings;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    if (kv.rfind("LD_PRELOAD=", 0) == 0 || kv.rfind("DLRR_", 0) == 0) continue;  // ask the machine, not dlrr
    envStrings.push_back(kv);
  }
  std::vector<char*> envp, args;
  for (auto& s : envStrings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> a = argv;
  for (auto& s : a) args.push_back(s.data());
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    ::dup2(pipeFd[1], 1);
    int devnull = ::open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      ::dup2(devnull, 0);
      ::dup2(devnull, 2);
    }
    // Not in the user's directory: nothing there (a numpy.py beside an unpacked trace) is
    // importable by the probe.
    if (::chdir("/") != 0) ::_exit(127);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  ::close(pipeFd[1]);
  timespec start{};
  clock_gettime(CLOCK_MONOTONIC, &start);
  char buf[4096];
  bool killed = false;
  for (;;) {
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    long left = static_cast<long>(timeoutSeconds) * 1000 - ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000);
    if (left <= 0) {
      ::kill(pid, SIGKILL);
      killed = true;
      break;
    }
    pollfd p{pipeFd[0], POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    ssize_t n = ::read(pipeFd[0], buf, sizeof buf);
    if (n <= 0) break;
    if (out.size() < (1 << 20)) out.append(buf, static_cast<size_t>(n));
  }
  ::close(pipeFd[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (killed) return -2;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The probe: one "key\tvalue" line per fact; never raises.
// Not `python -I`: that also drops PYTHONPATH and the user's site-packages (pip --user), where
// the job may have found torch, and the answer would be wrong. Only the implicit current
// directory ('' first on sys.path for -c) is dropped, before anything is imported.
const char* kProbe = R"PY(
import sys
sys.path[:] = [p for p in sys.path if p not in ("", ".")]
import os
def out(k, v):
    sys.stdout.write("%s\t%s\n" % (k, str(v).replace("\n", " ").replace("\t", " ")))
out("python", sys.version.split()[0])
for name in ("numpy", "torch"):
    try:
        m = __import__(name)
        out(name, getattr(m, "__version__", "?"))
    except Exception as e:
        out(name, "<not installed>" if isinstance(e, ImportError) else "<error: %s>" % type(e).__name__)
t = sys.modules.get("torch")
if t is not None:
    out("torch.num_threads", t.get_num_threads())
    out("cuda.compiled", getattr(t.version, "cuda", None) or "<unset>")
    try:
        avail = t.cuda.is_available()
        out("cuda.available", int(avail))
        if avail:
            out("cuda.device_count", t.cuda.device_count())
            for i in range(t.cuda.device_count()):
                out("cuda.device.%d" % i, t.cuda.get_device_name(i))
            out("cudnn.version", t.backends.cudnn.version())
    except Exception as e:
        out("cuda.available", "<error: %s>" % e)
blas = []
try:
    for line in open("/proc/self/maps"):
        f = line.split(None, 5)
        if len(f) == 6:
            p = f[5].strip()
            import re
            if re.search(r"/lib(openblas|blas|cblas|mkl|blis|flexiblas|lapack)[^/]*\.so[^/]*$", p) and p not in blas:
                blas.append(p)
except OSError:
    pass
out("blas", ":".join(blas) or "<unset>")
try:
    from importlib import metadata, util
except ImportError:
    metadata = util = None
for name in sys.argv[1:]:
    v = ""
    if metadata is not None:
        # Recorded names are import names (PIL); a distribution may differ (Pillow).
        dists = [name]
        try:
            dists += metadata.packages_distributions().get(name, [])
        except Exception:
            pass
        for d in dists:
            try:
                v = metadata.version(d)
            except Exception:
                v = ""
            if v:
                break
    if not v:
        m = sys.modules.get(name)
        v = getattr(m, "__version__", "") if m is not None else ""
    if not v and util is not None:
        try:
            v = "<installed, version unknown>" if util.find_spec(name) is not None else "<not installed>"
        except Exception:
            v = "<not installed>"
    out("package." + name, v)
)PY";

bool secretLooking(const std::string& k) {
  std::string u;
  for (char c : k) u += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const char* s : {"TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL", "AUTH", "COOKIE", "SESSION"})
    if (u.find(s) != std::string::npos) return true;
  return false;
}

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
      {"numpy", Impact::Matters, "numerical routines and the random streams of some distributions change between versions"},
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
      {"env.LD_LIBRARY_PATH", Impact::Matters, "which shared libraries load (CUDA, cuDNN, MKL): library-not-found failures"},
      {"env.LD_PRELOAD", Impact::Matters, "libraries forced into the process"},
      {"env.PYTHONPATH", Impact::Matters, "which modules import (and from where)"},
      {"env.PATH", Impact::Matters, "which programs run (python3, nvcc, the launcher's tools)"},
      {"env.LANG", Impact::Matters, "the default text encoding (UnicodeDecodeError under LANG=C)"},
      {"env.LC_ALL", Impact::Matters, "the default text encoding (UnicodeDecodeError under LC_ALL=C)"},
      {"env.LC_CTYPE", Impact::Matters, "the default text encoding"},
      {"env.PYTHONIOENCODING", Impact::Matters, "the encoding of stdin/stdout"},
      {"env.PYTHONUTF8", Impact::Matters, "UTF-8 mode: the default text encoding"},
      {"env.CUBLAS_WORKSPACE_CONFIG", Impact::Matters, "deterministic cuBLAS needs it"},
      {"env.PYTORCH_CUDA_ALLOC_CONF", Impact::Matters, "the CUDA caching allocator's behaviour (GPU OOM, fragmentation)"},
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

// Torch 1.x's version.py starts with `__version__ = '1.13.1'`; 2.x's with
// `__all__ = ['__version__', ...]`, so the assignment is searched for, not the name.
std::string versionAssigned(const std::string& pythonSource) {
  std::istringstream in(pythonSource);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("__version__", 0) != 0) continue;
    auto eq = line.find_first_not_of(" \t", 11);
    if (eq == std::string::npos || line[eq] != '=' || line.compare(eq, 2, "==") == 0) continue;
    auto q1 = line.find_first_not_of(" \t", eq + 1);
    if (q1 == std::string::npos || (line[q1] != '\'' && line[q1] != '"')) continue;
    auto q2 = line.find(line[q1], q1 + 1);
    if (q2 != std::string::npos) return line.substr(q1 + 1, q2 - q1 - 1);
  }
  return "";
}

const std::vector<std::string>& comparedEnvVars() {
  static const std::vector<std::string> v = {
      "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "PYTHONHASHSEED",
      "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "PATH", "LANG", "LC_ALL", "LC_CTYPE", "PYTHONIOENCODING",
      "PYTHONUTF8", "CUBLAS_WORKSPACE_CONFIG", "PYTORCH_CUDA_ALLOC_CONF", "HOME"};
  return v;
}

const char* impactId(Impact i) {
  switch (i) {
    case Impact::Breaks: return "breaks-replay";
    case Impact::Matters: return "matters";
    case Impact::Info: return "info";
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
          for (auto it : e.getPackages().getItems()) p.packages.push_back({str(it.getName()), str(it.getVersion()), str(it.getPath())});
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
          for (auto g : rp.getGpus()) rr.gpus.push_back({g.getDevice(), g.getMaxAllocated(), g.getMaxReserved(), g.getTotal()});
          p.peaks.push_back(rr);
        }
      });
    } catch (const TraceError&) {
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
  static const std::set<std::string> keys = {"python", "torch", "numpy", "blas", "torch.num_threads", "cuda.compiled",
                                             "cuda.available", "cuda.device_count", "cudnn.version"};
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

std::string chooseInterpreter() {
  if (::access("/usr/bin/python3", X_OK) == 0) return "/usr/bin/python3";
  // Only an absolute PATH entry: "" or "." there would pick a python3 in the current directory.
  std::string p = onPath("python3");
  return !p.empty() && p[0] == '/' ? p : "";
}

std::string recordedInterpreter(const RecordedEnvironment& rec) {
  if (rec.command.empty() || baseName(rec.command[0]).rfind("python", 0) != 0) return "";
  std::string p = onPath(rec.command[0]);
  return !p.empty() && ::access(p.c_str(), X_OK) == 0 ? p : "";
}

EnvFacts currentEnvironment(const RecordedEnvironment& rec, const ProbeOptions& opt, std::vector<std::string>& notes) {
  EnvFacts f;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  f["host"] = host;
  if (passwd* pw = ::getpwuid(::getuid())) f["user"] = pw->pw_name;
  utsname u{};
  if (::uname(&u) == 0) f["kernel"] = std::string(u.sysname) + " " + u.release + " " + u.machine;
  f["cpu.model"] = cpuModel();
  f["cpu.count"] = std::to_string(::sysconf(_SC_NPROCESSORS_ONLN));
  for (const auto& k : comparedEnvVars()) {
    const char* v = std::getenv(k.c_str());
    f["env." + k] = v ? v : "<unset>";
  }
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    if (kv.rfind("NCCL_", 0) == 0) {
      auto eq = kv.find('=');
      if (eq != std::string::npos) f["env." + kv.substr(0, eq)] = secretLooking(kv.substr(0, eq)) ? "<redacted>" : kv.substr(eq + 1);
    }
  }
  std::string drv = readFile("/proc/driver/nvidia/version", 4096);
  if (!drv.empty()) {
    auto p = drv.find("Kernel Module");
    std::string v = p == std::string::npos ? drv.substr(0, drv.find('\n')) : drv.substr(p + 13);
    v = v.substr(v.find_first_not_of(' '));
    f["gpu.driver"] = v.substr(0, v.find_first_of(" \n"));
  }

  std::vector<std::string> packages;
  for (const auto& p : rec.processes)
    if (!p.packages.empty()) {
      for (const auto& pk : p.packages)
        if (pk.name != "torch" && pk.name != "numpy") packages.push_back(pk.name);
      break;
    }

  // Run: only the user's --python or this machine's python3, never the trace's command (a
  // trace is data; its "python3" may be anyone's program). Read, not run: without the probe,
  // the recorded interpreter's file name still tells its version.
  std::string recPy = recordedInterpreter(rec);
  std::string py;
  if (!opt.python.empty()) {
    py = onPath(opt.python);
    if (py.empty()) py = opt.python;                  // not found: the probe says so
    if (py[0] != '/') py = realPath(".") + "/" + py;  // the probe runs in /
  } else {
    py = opt.runPython || recPy.empty() ? chooseInterpreter() : recPy;
  }
  bool probed = false;
  if (opt.runPython && !py.empty()) {
    std::vector<std::string> argv = {py, "-c", kProbe};
    argv.insert(argv.end(), packages.begin(), packages.end());
    std::string out;
    int rc = runCapture(argv, opt.timeoutSeconds, out);
    if (rc == 0) {
      probed = true;
      std::istringstream in(out);
      std::string line;
      while (std::getline(in, line)) {
        auto tab = line.find('\t');
        if (tab != std::string::npos) f[line.substr(0, tab)] = line.substr(tab + 1);
      }
      std::string note = "versions from " + py;
      if (opt.python.empty() && !recPy.empty() && realPath(recPy) != realPath(py))
        note += " (this machine's; the recorded command's " + recPy + " is not run unless named with --python)";
      notes.push_back(note);
    } else {
      notes.push_back(py + (rc == -2 ? " did not answer in time" : " could not be asked (exit status " + std::to_string(rc) + ")") +
                      "; versions from files instead");
    }
  } else if (py.empty()) {
    notes.push_back("no Python interpreter found here");
  }
  if (!probed) {
    // Cheap: the interpreter's name, the packages' own files.
    if (!py.empty()) {
      std::string v = versionFromName(realPath(py));
      if (!v.empty()) f["python"] = v;
    } else {
      f["python"] = "<none>";
    }
    for (const auto& p : rec.processes) {
      if (p.packages.empty()) continue;
      for (const auto& pk : p.packages) {
        if (pk.path.empty()) continue;
        std::string key = pk.name == "torch" || pk.name == "numpy" ? pk.name : "package." + pk.name;
        if (!exists(pk.path)) {
          f[key] = "<not installed at " + pk.path + ">";
          continue;
        }
        std::string v = pk.name == "torch" ? torchVersionFile(pk.path) : "";
        if (v.empty() && isDir(pk.path)) v = distVersion(dirName(pk.path), pk.name);
        if (v.empty() && !isDir(pk.path)) v = distVersion(dirName(pk.path), pk.name);
        if (!v.empty()) f[key] = v;
      }
      break;
    }
  }
  return f;
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
    if (rv == cv) continue;
    if ((k == "python" || k == "torch" || k == "numpy" || k.rfind("package.", 0) == 0) && versionsAgree(rv, cv)) continue;
    if (k == "python" && cv.find('.') != std::string::npos && rv.rfind(cv + ".", 0) == 0) continue;  // "3.11" vs "3.11.2"
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
      auto mm = [](const std::string& v) { auto d = v.find('.', v.find('.') + 1); return v.substr(0, d); };
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
      out.push_back({"path.command", rec.command[0], "<missing>", Impact::Matters, "the recorded program is not found here"});
    if (rec.command.size() > 1 && baseName(rec.command[0]).rfind("python", 0) == 0) {
      std::string script = rec.command[1];
      if (!script.empty() && script[0] != '-' && script.size() > 3 && script.compare(script.size() - 3, 3, ".py") == 0) {
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
    if (!named.empty() && (m.path == named || (m.path.size() > named.size() && m.path.compare(m.path.size() - named.size(), named.size(), named) == 0)))
      order.push_back(&m);
  for (const auto& m : facts.missingPaths) order.push_back(&m);
  for (const MissingPathRecord* m : order) {
    if (shown >= 10) break;
    if (isStartupProbe(m->path, m->op) || !seen.insert(m->path).second) continue;
    bool denied = m->error == EACCES || m->error == EPERM;
    if (m->error == ENOENT || m->error == ENOTDIR) {
      if (exists(m->path)) {
        out.push_back({"path.missing", m->path, "<exists>", Impact::Matters,
                       "the recorded job did not find this path; it exists here, so a rerun (or replay) may not fail the same way"});
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
      for (const char* d : {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib",
                            "/usr/local/lib", "/usr/local/cuda/lib64"})
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
    out.push_back({"library." + l.name, "failed to load", found.empty() ? "<not found>" : found,
                   found.empty() ? Impact::Info : Impact::Matters,
                   found.empty() ? "still not found here" : "it loads here, so the failure may not repeat"});
  }
  return out;
}

}  // namespace dlrr::triage
