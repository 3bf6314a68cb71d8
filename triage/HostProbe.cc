// The current machine's facts for `dltrace env-diff` and dlreplay's pre-flight check: files of
// the packages the recording imported, and (unless told not to) a probe run by a Python here
// (triage/env_probe.py, built into the binary).
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
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

#include "session/HostInfo.h"
#include "triage/Classifier.h"
#include "triage/EnvProbeScript.h"
#include "triage/Environment.h"
#include "triage/EnvironmentDetail.h"

extern char** environ;

namespace dlrr::triage {
using namespace detail;
namespace {

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
    long left = static_cast<long>(timeoutSeconds) * 1000 -
                ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000);
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
const char* kProbe = kEnvProbeScript;

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
  f["host"] = hostName();
  if (passwd* pw = ::getpwuid(::getuid())) f["user"] = pw->pw_name;
  if (std::string k = kernelId(); !k.empty()) f["kernel"] = k;
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
      if (eq != std::string::npos)
        f["env." + kv.substr(0, eq)] = secretLooking(kv.substr(0, eq)) ? "<redacted>" : kv.substr(eq + 1);
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
      notes.push_back(
          py + (rc == -2 ? " did not answer in time" : " could not be asked (exit status " + std::to_string(rc) + ")") +
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

}  // namespace dlrr::triage
