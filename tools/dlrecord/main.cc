// dlrecord [options] [-o TRACE] -- CMD [ARGS...]
//
// Runs CMD under the interposer and writes the launcher stream (command, redacted
// environment, exit status). The job is never harmed: if recording cannot start, CMD runs
// plainly and dlrecord says why; CMD's exit status is passed through (signal N -> 128+N).
#include <capnp/message.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "format/DistEnv.h"
#include "format/Ranks.h"
#include "format/Redact.h"
#include "format/StreamHeaderBuilder.h"
#include "format/StreamWriter.h"
#include "format/Trace.h"
#include "format/TraceDir.h"
#include "format/TraceError.h"
#include "format/Version.h"
#include "recorder/ResourceUsage.h"
#include "tools/common/ChildProcess.h"
#include "tools/common/Text.h"
#include "tools/dlrecord/InstallPaths.h"
#include "tools/dlrecord/RecordOptions.h"

extern char** environ;

namespace dlrr {
namespace {

constexpr int kExitUsage = 2;
constexpr int kExitCannotRun = 127;
constexpr int kExitNotExecutable = 126;

std::string defaultTraceName() {
  time_t t = time(nullptr);
  struct tm tm {};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "dlrr-%Y%m%d-%H%M%S.trace", &tm);
  return buf;
}

std::string absolutePath(const std::string& p) {
  std::error_code ec;
  auto abs = std::filesystem::absolute(p, ec);
  return ec ? p : abs.lexically_normal().string();
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

int64_t realNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// Creates the trace directory and the launcher stream. Throws TraceError; Usage when `-o` names a
// path that cannot hold a trace (known before the job starts, so the job is not run).
std::unique_ptr<StreamWriter> openLauncherStream(const RecordOptions& o, const std::string& trace) {
  UniqueFd dir;
  try {
    dir = createTraceDir(trace);
  } catch (const TraceError& e) {
    throw TraceError(ErrorKind::Usage, std::string("-o: ") + e.what());
  }
  // Under torchrun (`torchrun ... --no-python dlrecord -o T -- python3 train.py`) one dlrecord
  // runs per rank, possibly on many hosts sharing T: each writes launcher.rank<R>.dls into the
  // same trace, and only its own name must be free.
  std::string launcherName = kLauncherStream;
  if (std::string rb = rankStreamBase(DistEnv::fromEnvironment()); !rb.empty()) {
    launcherName += "." + rb;
    if (::faccessat(dir.get(), (launcherName + kStreamExt).c_str(), F_OK, AT_SYMLINK_NOFOLLOW) == 0)
      throw TraceError(ErrorKind::Usage, trace + " already holds the recording of this rank (" + launcherName +
                                             "); remove it or choose another -o");
  } else if (!listStreams(dir.get()).empty()) {
    throw TraceError(ErrorKind::Usage, trace + " already holds a trace; remove it or choose another -o");
  }
  capnp::MallocMessageBuilder hm;
  auto h = initStreamHeader(hm, launcherName, schema::StreamHeader::Role::LAUNCHER);
  h.setFormatMinor(kFormatMinor);
  auto ti = h.initTrace();
  ti.setCreatedNs(realNs());
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  ti.setHost(host);
  if (passwd* pw = ::getpwuid(::getuid())) ti.setUser(pw->pw_name);
  ti.setUid(::getuid());
  auto cmd = ti.initCommand(static_cast<unsigned>(o.command.size()));
  for (size_t i = 0; i < o.command.size(); ++i) cmd.set(static_cast<unsigned>(i), o.command[i]);
  std::error_code ec;
  ti.setCwd(std::filesystem::current_path(ec).string());
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<std::string> redacted;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    std::string k = kv.substr(0, eq);
    if (isSecretName(k, o.redact)) {
      env.emplace_back(k, kRedacted);
      redacted.push_back(k);
    } else {
      env.emplace_back(k, kv.substr(eq + 1));
    }
  }
  auto le = ti.initEnv(static_cast<unsigned>(env.size()));
  for (size_t i = 0; i < env.size(); ++i) {
    le[static_cast<unsigned>(i)].setKey(env[i].first);
    le[static_cast<unsigned>(i)].setValue(env[i].second);
  }
  auto rn = ti.initRedactedNames(static_cast<unsigned>(redacted.size()));
  for (size_t i = 0; i < redacted.size(); ++i) rn.set(static_cast<unsigned>(i), redacted[i]);
  auto rp = ti.initRedactPatterns(static_cast<unsigned>(o.redact.size()));
  for (size_t i = 0; i < o.redact.size(); ++i) rp.set(static_cast<unsigned>(i), o.redact[i]);
  ti.setCpuModel(cpuModel());
  ti.setCpuCount(static_cast<uint32_t>(::sysconf(_SC_NPROCESSORS_ONLN)));
  utsname u{};
  if (::uname(&u) == 0) ti.setKernel(std::string(u.sysname) + " " + u.release + " " + u.machine);
  ti.setCaptureMode(o.capture);
  auto opts = ti.initOptions(3);
  opts[0].setKey("ring_steps");
  opts[0].setValue(std::to_string(o.ringSteps));
  opts[1].setKey("collectives");
  opts[1].setValue(o.collectives);
  opts[2].setKey("snapshot_every");
  opts[2].setValue(o.snapshotEvery);
  std::string name;
  return std::make_unique<StreamWriter>(createStreamFile(dir.get(), launcherName, name), hm);
}

// For triage: the job's peak memory (the largest of its processes, from wait4) and the OOM
// kills its memory cgroup counted while it ran; written even when the job was SIGKILLed.
void appendJobResources(StreamWriter& w, const rusage& ru, int64_t oomKillsBefore, int64_t tNs) {
  try {
    ResourceSample limits;
    fillLimits(limits);
    capnp::MallocMessageBuilder m;
    auto e = m.initRoot<schema::Event>();
    e.setTNs(tNs);
    e.setStep(-1);
    auto rp = e.initResourcePeak();
    rp.setReason("launcher");
    rp.setMaxRssBytes(static_cast<uint64_t>(ru.ru_maxrss) * 1024);
    rp.setAddressSpaceLimit(limits.addressSpaceLimit);
    rp.setMemoryLimit(limits.memoryLimit);
    rp.setMemTotal(limits.memTotal);
    int64_t after = cgroupOomKills();
    if (oomKillsBefore >= 0 && after > oomKillsBefore) rp.setOomKills(static_cast<uint64_t>(after - oomKillsBefore));
    rp.setCpuUserNs(static_cast<uint64_t>(ru.ru_utime.tv_sec) * 1000000000ull +
                    static_cast<uint64_t>(ru.ru_utime.tv_usec) * 1000ull);
    rp.setCpuSystemNs(static_cast<uint64_t>(ru.ru_stime.tv_sec) * 1000000000ull +
                      static_cast<uint64_t>(ru.ru_stime.tv_usec) * 1000ull);
    w.append(m);
  } catch (...) {
  }
}

std::string prependPath(const char* var, const std::string& first) {
  const char* old = std::getenv(var);
  return old && *old ? first + ":" + old : first;
}

// CUDA loads the library named by CUDA_INJECTION64_PATH at driver initialisation and calls its
// InitializeInjection (GPU capture, docs/gpu.md). There is one such variable: a library the
// user configured is kept, and GPU capture is then off. Returns why it is off ("" when on).
std::string cudaInjection(const InstallPaths& paths, std::vector<std::string>& env) {
  const char* theirs = std::getenv("CUDA_INJECTION64_PATH");
  if (theirs && *theirs && paths.library != theirs) {
    std::error_code ec;
    if (!std::filesystem::equivalent(paths.library, theirs, ec))
      return "another injection library is configured (CUDA_INJECTION64_PATH=" + std::string(theirs) + "); it is kept";
  }
  env.push_back("CUDA_INJECTION64_PATH=" + paths.library);
  return "";
}

// The job's environment: ours plus what the interposer and the Python hook need.
std::vector<std::string> childEnvironment(const RecordOptions& o, const std::string& trace, const InstallPaths& paths,
                                          int statusFd, std::string& gpuOff) {
  std::vector<std::string> env;
  auto skip = [](const std::string& kv) {
    for (const char* k :
         {"LD_PRELOAD=", "PYTHONPATH=", "DLRR_MODE=", "DLRR_TRACE=", "DLRR_CAPTURE=", "DLRR_COLLECTIVES=",
          "DLRR_RING_STEPS=", "DLRR_STATUS_FD=", "DLRR_LIBRARY=", "DLRR_SNAPSHOT_EVERY="})
      if (kv.rfind(k, 0) == 0) return true;
    return false;
  };
  gpuOff.clear();
  for (char** e = environ; *e; ++e)
    if (!skip(*e)) env.emplace_back(*e);
  std::vector<std::string> injection;
  gpuOff = cudaInjection(paths, injection);
  if (!injection.empty()) {
    std::erase_if(env, [](const std::string& kv) { return kv.rfind("CUDA_INJECTION64_PATH=", 0) == 0; });
    env.insert(env.end(), injection.begin(), injection.end());
  }
  env.push_back("LD_PRELOAD=" + prependPath("LD_PRELOAD", paths.library));
  env.push_back("PYTHONPATH=" + prependPath("PYTHONPATH", paths.pythonHook));
  env.push_back("DLRR_MODE=record");
  env.push_back("DLRR_TRACE=" + trace);
  env.push_back("DLRR_CAPTURE=" + o.capture);
  env.push_back("DLRR_RING_STEPS=" + std::to_string(o.ringSteps));
  env.push_back("DLRR_COLLECTIVES=" + o.collectives);
  env.push_back("DLRR_LIBRARY=" + paths.library);
  env.push_back("DLRR_SNAPSHOT_EVERY=" + o.snapshotEvery);
  struct stat st {};
  if (statusFd >= 0 && ::fstat(statusFd, &st) == 0)  // FD:INODE, so the library can tell it is still our pipe
    env.push_back("DLRR_STATUS_FD=" + std::to_string(statusFd) + ":" + std::to_string(st.st_ino));
  return env;
}

// Bytes of the failure in the summary line: room for an exception's type, its first line and
// its last.
constexpr size_t kSummaryFailureMax = 300;

std::string drain(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

int run(int argc, char** argv) {
  RecordOptions o;
  try {
    o = parseRecordOptions(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const tools::UsageError& e) {
    tools::printUsageError("dlrecord", e);
    return kExitUsage;
  }
  if (o.action == RecordOptions::Action::Help) {
    std::fputs(kRecordUsage, stdout);
    return 0;
  }
  if (o.action == RecordOptions::Action::Version) {
    std::printf("dlrecord %s (trace format %u.%u)\n", kDlrrVersion, kFormatMajor, kFormatMinor);
    return 0;
  }
  std::string trace = absolutePath(o.output.empty() ? defaultTraceName() : o.output);
  std::vector<std::string> problems;

  std::unique_ptr<StreamWriter> launcher;
  std::optional<InstallPaths> paths;
  try {
    paths = findInstallPaths();
    launcher = openLauncherStream(o, trace);
  } catch (const TraceError& e) {
    // A bad -o (missing parent, a file, no permission, an existing trace) is the user's to fix
    // before the job runs; only a broken installation still runs the job unrecorded.
    if (e.kind() == ErrorKind::Usage) {
      std::fprintf(stderr, "dlrecord: %s\n", tools::printable(e.what()).c_str());
      return kExitUsage;
    }
    problems.push_back(std::string("cannot record: ") + e.what() + "; running the job without recording");
  }
  bool recording = launcher != nullptr;
  const int64_t launchNs = realNs();
  const int64_t oomKillsBefore = cgroupOomKills();  // to tell an OOM kill of the job afterwards

  int statusPipe[2] = {-1, -1};
  if (recording && ::pipe2(statusPipe, O_CLOEXEC | O_NONBLOCK) != 0) statusPipe[0] = statusPipe[1] = -1;
  tools::LaunchSpec spec;
  spec.argv = o.command;
  std::string gpuOff;
  if (recording)
    spec.env = childEnvironment(o, trace, *paths, statusPipe[1], gpuOff);
  else
    for (char** e = environ; *e; ++e) spec.env.emplace_back(*e);
  if (!gpuOff.empty()) {
    problems.push_back("GPU capture off: " + gpuOff);
    capnp::MallocMessageBuilder sm;
    auto e = sm.initRoot<schema::Event>();
    e.setStep(-1);
    auto rs = e.initRecorderStatus();
    rs.setOk(false);
    rs.setMessage("GPU capture off: " + gpuOff);
    launcher->append(sm);
  }
  if (statusPipe[1] >= 0) spec.inheritFds.push_back(statusPipe[1]);  // the job's library reports through it
  tools::ChildResult child;
  try {
    child = tools::launch(spec);
  } catch (const std::system_error& e) {
    std::fprintf(stderr, "dlrecord: cannot start the job: %s\n", e.what());
    return 1;
  }
  if (statusPipe[1] >= 0) ::close(statusPipe[1]);
  if (child.execError != 0) {
    std::fprintf(stderr, "dlrecord: cannot run '%s': %s\n", o.command[0].c_str(), std::strerror(child.execError));
    if (launcher) {
      launcher->close();
      launcher.reset();
    }
    std::error_code ec;
    std::filesystem::remove_all(trace, ec);  // nothing was recorded: leave nothing behind
    return child.execError == ENOENT ? kExitCannotRun : kExitNotExecutable;
  }
  const pid_t pid = child.pid;
  const int status = child.waitStatus;
  const rusage& childUsage = child.usage;
  int exitCode = tools::shellExitCode(status);

  std::string statusText = statusPipe[0] >= 0 ? drain(statusPipe[0]) : "";
  if (statusPipe[0] >= 0) ::close(statusPipe[0]);
  size_t firstStatusProblem = problems.size();
  size_t start = 0;
  while (start < statusText.size()) {
    size_t nl = statusText.find('\n', start);
    if (nl == std::string::npos) nl = statusText.size();
    if (nl > start) problems.push_back(statusText.substr(start, nl - start));
    start = nl + 1;
  }

  if (launcher) {
    // What the job's library reported (e.g. a full disk stopped its stream) is kept in the
    // launcher stream too, so `dltrace info` shows the trace is incomplete and why.
    for (size_t i = firstStatusProblem; i < problems.size(); ++i) {
      capnp::MallocMessageBuilder sm;
      auto e = sm.initRoot<schema::Event>();
      e.setStep(-1);
      auto rs = e.initRecorderStatus();
      rs.setOk(false);
      rs.setMessage(problems[i]);
      launcher->append(sm);
    }
    capnp::MallocMessageBuilder em;
    auto e = em.initRoot<schema::Event>();
    e.setStep(-1);
    auto pe = e.initProcessExit();
    pe.setPid(pid);
    pe.setExited(WIFEXITED(status));
    pe.setCode(WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    pe.setExitCode(exitCode);
    e.setTNs(realNs() - launchNs);
    launcher->append(em);
    appendJobResources(*launcher, childUsage, oomKillsBefore, realNs() - launchNs);
    launcher->close();
    if (launcher->failed()) problems.push_back("launcher stream incomplete: " + launcher->error());
  }

  for (const auto& p : problems) std::fprintf(stderr, "dlrecord: %s\n", p.c_str());
  if (recording && !o.quiet) {
    try {
      auto t = Trace::open(trace, OpenMode::Tolerant);
      TraceSummary s = t->summarize();
      std::string line = "dlrecord: trace " + tools::printable(trace) + ": " + std::to_string(s.steps) + " step" +
                         (s.steps == 1 ? "" : "s") +
                         // Steps that trained nothing (evaluation with gradients on): replay verifies them too.
                         (s.untrainedSteps ? " (+" + std::to_string(s.untrainedSteps) + " untrained)" : "") + ", " +
                         tools::humanBytes(s.bytes);
      RankReport ranks = analyzeRanks(*t);
      // One line whatever the job raised (a DataLoader worker's exception carries a traceback);
      // `dltrace info` / `events` show the whole message.
      if (ranks.origin)
        line += "; first non-finite value: " + tools::printableSummary(formatOrigin(*ranks.origin), kSummaryFailureMax);
      else if (s.failure)
        line += "; " + tools::printableSummary(formatFailure(*s.failure), kSummaryFailureMax);
      if (ranks.distributed()) line += " (" + std::to_string(ranks.ranks.size()) + " rank streams)";
      if (s.mainStream.empty()) line += "; no process recorded anything (not a Python/torch job?)";
      // Notes the status pipe did not already deliver (e.g. "no steps captured: ...").
      for (const auto& n : s.notes) {
        bool shown = false;
        for (const auto& p : problems) shown = shown || n.find(p.substr(p.find(": ") + 2)) != std::string::npos;
        if (!shown) std::fprintf(stderr, "dlrecord: note: %s\n", tools::printable(n).c_str());
      }
      std::fprintf(stderr, "%s\n", line.c_str());
    } catch (const TraceError& e) {
      std::fprintf(stderr, "dlrecord: trace %s is not readable: %s\n", trace.c_str(), e.what());
    }
  }
  return exitCode;
}

}  // namespace
}  // namespace dlrr

int main(int argc, char** argv) { return dlrr::run(argc, argv); }
