#include "tools/dlrecord/LauncherStream.h"

#include <capnp/message.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <filesystem>
#include <system_error>
#include <vector>

#include "format/Redact.h"
#include "format/StreamHeaderBuilder.h"
#include "format/TraceDir.h"
#include "format/TraceError.h"
#include "format/Version.h"
#include "recorder/ResourceUsage.h"
#include "session/DistEnv.h"
#include "session/HostInfo.h"

extern char** environ;

namespace dlrr {

int64_t realNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

std::unique_ptr<StreamWriter> openLauncherStream(const RecordOptions& o, const std::string& trace,
                                                 std::vector<std::string>* leftOut) {
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
  ti.setHost(hostName());
  if (passwd* pw = ::getpwuid(::getuid())) ti.setUser(pw->pw_name);
  ti.setUid(::getuid());
  // Credentials never reach the trace: token-shaped arguments and URL user-info are redacted
  // (a replay that needs them takes the user's own command after '--').
  auto cmd = ti.initCommand(static_cast<unsigned>(o.command.size()));
  size_t argsRedacted = 0;
  for (size_t i = 0; i < o.command.size(); ++i) {
    bool changed = false;
    cmd.set(static_cast<unsigned>(i), redactValue(o.command[i], changed));
    argsRedacted += changed;
  }
  std::error_code ec;
  ti.setCwd(std::filesystem::current_path(ec).string());
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<std::string> redacted;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    std::string k = kv.substr(0, eq);
    bool changed = false;
    std::string value = isSecretName(k, o.redact) ? std::string(kRedacted) : redactValue(kv.substr(eq + 1), changed);
    if (value == kRedacted || changed) redacted.push_back(k);
    env.emplace_back(k, value);
  }
  if (leftOut) {
    std::string names;
    for (size_t i = 0; i < redacted.size() && i < 8; ++i) names += (i ? ", " : "") + redacted[i];
    if (redacted.size() > 8) names += ", ...";
    if (!redacted.empty())
      leftOut->push_back("the values (or the credentials in the values) of " + std::to_string(redacted.size()) +
                         " environment variable(s): " + names);
    if (argsRedacted)
      leftOut->push_back(std::to_string(argsRedacted) + " command-line argument(s) holding credentials");
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
  ti.setKernel(kernelId());
  ti.setCaptureMode(o.capture);
  auto opts = ti.initOptions(6);
  opts[0].setKey("ring_steps");
  opts[0].setValue(std::to_string(o.ringSteps));
  opts[1].setKey("collectives");
  opts[1].setValue(o.collectives);
  opts[2].setKey("snapshot_every");
  opts[2].setValue(o.snapshotEvery);
  opts[3].setKey("batches");
  opts[3].setValue(o.batches);
  opts[4].setKey("window");
  opts[4].setValue(o.batches == "window" ? std::to_string(o.window) : "0");
  opts[5].setKey("budget");
  opts[5].setValue(std::to_string(o.budget));
  // The launcher's own name claims the trace (O_EXCL): a second dlrecord -o SAME started at
  // the same moment passed the check above too, but only one creates the name.
  std::string name;
  UniqueFd fd = createStreamFile(dir.get(), launcherName, name);
  if (name != launcherName) {
    ::unlinkat(dir.get(), (name + kStreamExt).c_str(), 0);
    throw TraceError(ErrorKind::Usage, trace + " is being recorded by another dlrecord; choose another -o");
  }
  return std::make_unique<StreamWriter>(std::move(fd), hm);
}

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
  } catch (...) {  // best effort: the launcher's usage is informational; the job's own streams hold its record
  }
}

void appendRecorderProblem(StreamWriter& w, const std::string& message) {
  capnp::MallocMessageBuilder sm;
  auto e = sm.initRoot<schema::Event>();
  e.setStep(-1);
  auto rs = e.initRecorderStatus();
  rs.setOk(false);
  rs.setMessage(message);
  w.append(sm);
}

void appendProcessExit(StreamWriter& w, int pid, int waitStatus, int exitCode, int64_t tNs) {
  capnp::MallocMessageBuilder em;
  auto e = em.initRoot<schema::Event>();
  e.setStep(-1);
  auto pe = e.initProcessExit();
  pe.setPid(pid);
  pe.setExited(WIFEXITED(waitStatus));
  pe.setCode(WIFEXITED(waitStatus) ? WEXITSTATUS(waitStatus) : WTERMSIG(waitStatus));
  pe.setExitCode(exitCode);
  e.setTNs(tNs);
  w.append(em);
}

}  // namespace dlrr
