// dlreplay [options] TRACE [--until TARGET] [--debug pdb|gdb|wait] [-- CMD ...]
//
// Re-runs the recorded job in replay mode: the recorded environment and thread settings,
// entropy, batches and RNG states served from the trace, every step checked against the
// recording, and a stop at the target. It shows the command before running it, and never
// runs the command of a trace from another host or user without consent.
#include <fcntl.h>
#include <kj/exception.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "format/Ranks.h"
#include "format/Redact.h"
#include "format/Trace.h"
#include "format/TraceError.h"
#include "format/Version.h"
#include "replayer/ReplayReport.h"
#include "replayer/ReplaySession.h"
#include "replayer/ReplayTarget.h"
#include "tools/common/ChildProcess.h"
#include "tools/common/Json.h"
#include "tools/common/Text.h"
#include "tools/dlrecord/InstallPaths.h"
#include "tools/dlreplay/Check.h"
#include "tools/dlreplay/ReplayFiles.h"
#include "tools/dlreplay/ReplayOptions.h"
#include "tools/dlreplay/ReplayOutcome.h"
#include "tools/dlreplay/ReplayPlan.h"
#include "triage/TraceFacts.h"

extern char** environ;

namespace dlrr {
namespace {

int exitFor(ErrorKind k) {
  switch (k) {
    case ErrorKind::Io:
      return kIo;
    case ErrorKind::NotATrace:
      return kNotATrace;
    case ErrorKind::FutureVersion:
      return kFuture;
    case ErrorKind::Corrupt:
      return kCorrupt;
    case ErrorKind::Usage:
      return kUsage;
    case ErrorKind::NotFound:
      return kNotFound;
  }
  return kCorrupt;
}

// Recorded text (an exception message, a traceback) shown in one of dlreplay's lines: first and
// last line, escaped (as dlrecord's summary line).
constexpr size_t kSummaryTextMax = 300;

std::string shellQuote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%") ==
                        std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string joinCommand(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) out += (out.empty() ? "" : " ") + shellQuote(a);
  return out;
}

std::map<std::string, std::string> readReport(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return parseReplayReport(text.str());
}

std::string currentHost() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

// What of a GPU the replayed stream used ("" when none): its process initialised CUDA, or
// its collectives went through NCCL.
std::string gpuUsed(StreamReader& s) {
  std::string device, backend;
  bool initialised = false;
  try {
    s.forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
      if (!e.isRuntimeInfo()) return;
      for (auto kv : e.getRuntimeInfo().getItems()) {
        std::string k = kv.getKey().cStr(), v = kv.getValue().cStr();
        if (k == "cuda.initialized" && v == "1") initialised = true;
        if (k == "cuda.device.0" && device.empty()) device = v;
        if (k == "dist.backend") backend = v;
      }
    });
  } catch (const TraceError&) {  // damaged: what precedes the damage tells
  }
  if (!initialised && backend != "nccl") return "";
  std::string what = device.empty() ? std::string("a CUDA device") : device;
  if (backend == "nccl") what += ", NCCL";
  return what;
}

bool haveCudaDevice() {
  for (const char* p : {"/dev/nvidiactl", "/proc/driver/nvidia/version", "/dev/dxg"})
    if (::access(p, F_OK) == 0) return true;
  return false;
}

using RankReports = std::vector<std::pair<int, std::string>>;

// --all-ranks: one line per rank, then the verdict. 0 when every rank replayed its stream to
// the end with every step verified; 11 when one diverged; 12 when none attached; else 10.
int allRanksOutcome(const RankReport& ranks, const RankReports& files, int status, bool json) {
  int diverged = 0, attached = 0, complete = 0;
  std::string out;
  tools::JsonWriter j(out, 0);
  j.beginObject();
  j.key("ranks").beginArray();
  for (const auto& [rank, path] : files) {
    auto rep = readReport(path);
    ::unlink(path.c_str());
    uint64_t recorded = 0;
    for (const auto& r : ranks.ranks)
      if (r.rank == rank) recorded = r.steps;
    std::string verified = rep.count("verified_steps") ? rep["verified_steps"] : "0";
    std::string line;
    std::string state;
    if (rep.empty()) {
      state = "not-attached";
      line = "never attached to its stream";
    } else if (rep.count("divergence.step")) {
      ++attached;
      ++diverged;
      state = "divergence";
      line = "diverged at step " + rep["divergence.step"] + ": " + rep["divergence.detail"];
    } else {
      ++attached;
      bool all = std::strtoull(verified.c_str(), nullptr, 10) == recorded;
      complete += all;
      state = all ? "verified" : "incomplete";
      line = verified + " of " + std::to_string(recorded) + " recorded steps verified bit-exact";
    }
    if (rep.count("dist.collectives")) line += "; collectives: " + rep["dist.collectives"];
    if (!json) std::fprintf(stderr, "dlreplay: rank %d: %s\n", rank, line.c_str());
    j.beginObject();
    j.field("rank", rank);
    j.field("outcome", state);
    j.field("message", line);
    j.field("verified_steps", std::strtoll(verified.c_str(), nullptr, 10));
    j.field("recorded_steps", static_cast<long long>(recorded));
    j.endObject();
  }
  j.endArray();
  int code = diverged                                     ? kDivergence
             : attached == 0                              ? kNoReplay
             : complete == static_cast<int>(files.size()) ? kOk
                                                          : kNotReached;
  std::string verdict = code == kOk           ? "every rank replayed to the end, every step verified"
                        : code == kDivergence ? std::to_string(diverged) + " rank(s) diverged from the recording"
                        : code == kNoReplay   ? "no rank attached to the trace (is it the recorded launcher command?)"
                                              : "not every rank replayed all its recorded steps";
  if (WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0))
    verdict += std::string(" (the launcher ") +
               (WIFSIGNALED(status) ? std::string("was killed by ") + strsignal(WTERMSIG(status))
                                    : "exited with " + std::to_string(WEXITSTATUS(status))) +
               ")";
  j.field("exit_code", code);
  j.field("message", verdict);
  j.endObject();
  if (json)
    std::printf("%s\n", out.c_str());
  else
    std::fprintf(stderr, "dlreplay: %s\n", verdict.c_str());
  return code;
}

int run(int argc, char** argv) {
  ReplayOptions o;
  try {
    o = parseReplayOptions(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const tools::UsageError& e) {
    tools::printUsageError("dlreplay", e);
    return kUsage;
  }
  if (o.action == ReplayOptions::Action::Help) {
    std::fputs(kReplayUsage, stdout);
    return kOk;
  }
  if (o.action == ReplayOptions::Action::Version) {
    std::printf("dlreplay %s\n", kDlrrVersion);
    return kOk;
  }
  std::unique_ptr<Trace> trace;
  TraceSummary sum;
  StreamReader* launcher = nullptr;
  try {
    trace = Trace::open(o.trace, OpenMode::Tolerant);
    for (const auto& b : trace->broken())
      std::fprintf(stderr, "dlreplay: warning: stream %s skipped: %s\n", b.name.c_str(), b.message.c_str());
    sum = trace->summarize();
    // Replay verifies every recorded step, untrained ones (no backward()) included.
    sum.steps += sum.untrainedSteps;
    launcher = trace->launcher();
  } catch (const TraceError& e) {
    std::fprintf(stderr, "dlreplay: %s\n", e.what());
    return exitFor(e.kind());
  }
  // Distributed traces (docs/distributed.md): one rank alone, or all of them.
  RankReport ranks = analyzeRanks(*trace);
  for (const auto& r : ranks.ranks)
    if (!o.stream.empty() && (o.stream == r.stream || o.stream == r.stream + ".dls")) {
      o.rank = r.rank;  // a rank's stream replays as that rank, alone (not under its launcher)
      o.stream.clear();
    }
  if (ranks.distributed() && !o.rank && !o.allRanks && o.stream.empty()) {
    bool kept = true;
    for (const auto& r : ranks.ranks) kept = kept && r.keptResults == r.results;
    if (kept) {
      int pick = ranks.origin ? ranks.origin->rank : ranks.ranks.front().rank;
      for (const auto& r : ranks.ranks)
        if (!ranks.origin && r.failure) {
          pick = r.rank;
          break;
        }
      o.rank = pick;
      std::fprintf(
          stderr,
          "dlreplay: distributed trace (%zu ranks): replaying rank %d alone (--rank %d; --all-ranks for every rank)\n",
          ranks.ranks.size(), pick, pick);
    } else {
      o.allRanks = true;
      std::fprintf(
          stderr,
          "dlreplay: distributed trace (%zu ranks) recorded without collective results: relaunching every rank "
          "(--all-ranks)\n",
          ranks.ranks.size());
    }
  }
  if ((o.rank || o.allRanks) && !ranks.distributed()) {
    std::fprintf(
        stderr,
        "dlreplay: the trace holds no rank of a distributed job (no torch.distributed launcher was recorded)\n");
    return kNotFound;
  }
  const RankStatus* rankSel = nullptr;
  if (o.rank) {
    for (const auto& r : ranks.ranks)
      if (r.rank == *o.rank && (!rankSel || r.restart > rankSel->restart)) rankSel = &r;
    if (!rankSel) {
      std::fprintf(stderr, "dlreplay: the trace holds no rank %d (ranks 0 to %d; see dltrace info)\n", *o.rank,
                   ranks.ranks.back().rank);
      return kNotFound;
    }
    if (rankSel->keptResults != rankSel->results) {
      std::fprintf(
          stderr,
          "dlreplay: rank %d cannot run without its peers: the recording kept %llu of its %llu collective results "
          "(record with 'dlrecord --collectives full'); replay every rank with --all-ranks instead\n",
          *o.rank, static_cast<unsigned long long>(rankSel->keptResults),
          static_cast<unsigned long long>(rankSel->results));
      return kNotFound;
    }
    // Targets and step counts are this rank's.
    sum.steps = rankSel->steps;
    sum.failure = rankSel->failure;
  }
  if (o.allRanks) {
    if (!o.until.empty() && o.until != "end") {
      std::fprintf(stderr,
                   "dlreplay: --all-ranks replays every rank to the end (a rank stopped early would leave its peers "
                   "waiting); to stop at a target replay one rank with --rank R --until %s\n",
                   o.until.c_str());
      return kUsage;
    }
    o.until = "end";
  }
  StreamReader* stream = rankSel            ? trace->find(rankSel->stream)
                         : o.stream.empty() ? trace->mainStream()
                                            : trace->find(o.stream);
  if (!stream) {
    std::fprintf(stderr, "dlreplay: %s\n",
                 o.stream.empty() ? "the trace holds no recorded process to replay"
                                  : ("no stream named '" + o.stream + "' in the trace (see dltrace info)").c_str());
    return kNotFound;
  }
  if (!launcher) {
    std::fprintf(stderr, "dlreplay: the trace has no launcher stream (recorded command unknown)\n");
    return kCorrupt;
  }

  // Triage facts: for --check's verdict and the pre-flight environment check.
  triage::TriageInput facts;
  try {
    facts = triage::gatherFacts(*trace);
  } catch (const std::exception&) {
  }
  bool checkExit = false;  // --check of a job that failed without a recorded exception or signal
  if (o.check && !sum.failure) {
    if (!facts.exitCode || *facts.exitCode == 0) {
      std::fprintf(stderr, "dlreplay: --check: the recording holds no failure (%s): nothing to reproduce\n",
                   facts.exitCode ? "the job exited 0" : "the job's end was not recorded");
      return kNotFound;
    }
    triage::TriageResult early = triage::classify(facts);
    if (early.category == triage::Category::ExternalSignal) {
      // Nothing in the job raised it: replaying cannot send it again.
      std::fprintf(stderr,
                   "dlreplay: not reproduced: %s; replay does not re-send signals from outside\n"
                   "dlreplay: triage: %s [%s], a non-deterministic kind of failure (%s)\n",
                   early.summary.c_str(), triage::categoryInfo(early.category).name,
                   triage::dimensionName(early.dimension), triage::categoryInfo(early.category).why);
      return kNotReproduced;
    }
    checkExit = true;
    o.until = "end";
  }

  // The target, checked against what the trace holds before anything runs.
  std::string until = o.until;
  if (until.empty()) {
    if (sum.failure && sum.failure->kind == "nonfinite")
      until = "nan";
    else if (sum.failure)
      until = "crash";
    else
      until = "end";
  }
  std::string err;
  ReplayTarget target = *parseReplayTarget(until, err);
  if (target.kind == ReplayTarget::Kind::Nan && !(sum.failure && sum.failure->kind == "nonfinite")) {
    bool any = false;
    for (auto& s : trace->streams()) {
      try {
        s->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
          any = any || (e.isFailure() && e.getFailure().getKind() == schema::Failure::Kind::NONFINITE);
        });
      } catch (const TraceError&) {  // damage: what precedes it was searched
      }
    }
    if (!any) {
      std::fprintf(stderr, "dlreplay: the trace records no non-finite value; use --until step=N, crash or end\n");
      return kNotFound;
    }
  }
  if (target.kind == ReplayTarget::Kind::Crash && !(sum.failure && sum.failure->kind != "nonfinite")) {
    std::fprintf(stderr, "dlreplay: the trace records no exception or fatal signal; use --until nan, step=N or end\n");
    return kNotFound;
  }
  if (target.kind == ReplayTarget::Kind::Step && target.step >= static_cast<int64_t>(sum.steps)) {
    if (sum.steps == 0)
      std::fprintf(stderr, "dlreplay: step %lld is beyond the trace, which holds no completed step\n",
                   static_cast<long long>(target.step));
    else
      std::fprintf(stderr, "dlreplay: step %lld is beyond the trace, which holds steps 0 to %lld\n",
                   static_cast<long long>(target.step), static_cast<long long>(sum.steps) - 1);
    return kNotFound;
  }

  // A GPU job (rank) replays on a GPU machine only: say so before anything runs.
  if (!haveCudaDevice()) {
    std::string gpu = o.allRanks ? std::string() : gpuUsed(*stream);
    if (o.allRanks)
      for (const auto& r : ranks.ranks)
        if (StreamReader* rs = trace->find(r.stream); rs && gpu.empty()) gpu = gpuUsed(*rs);
    if (!gpu.empty()) {
      std::fprintf(stderr,
                   "dlreplay: %s ran on a GPU (%s): it replays on a machine with a CUDA device only, and this one "
                   "has none (no NVIDIA driver found)\n",
                   o.allRanks ? "the job" : ("stream " + stream->name()).c_str(), gpu.c_str());
      return kNotFound;
    }
  }

  // Jump replay (ReplayPlan.h): the snapshot restored, from the replayed stream's Snapshot events.
  JumpPlan plan;
  if (o.allRanks) {
    if (!o.from.empty() && o.from != "start") {
      std::fprintf(stderr, "dlreplay: --all-ranks replays from step 0; --from is for one process\n");
      return kUsage;
    }
  } else {
    std::vector<SnapshotInfo> snaps;
    try {
      stream->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
        if (e.isSnapshot())
          snaps.push_back(
              {e.getSnapshot().getStep(), e.getSnapshot().getReason() == schema::Snapshot::Reason::FAILURE});
      });
    } catch (const TraceError&) {  // damage: the snapshots before it are usable
    }
    int64_t targetStep = target.kind == ReplayTarget::Kind::Step                   ? target.step
                         : (target.kind != ReplayTarget::Kind::End && sum.failure) ? sum.failure->step
                                                                                   : -1;
    auto p = planJump(snaps, target.kind, targetStep, o.from, o.check, err);
    if (!p) {
      std::fprintf(stderr, "dlreplay: %s\n", err.c_str());
      return kNotFound;
    }
    plan = *p;
  }

  auto ti = launcher->header().getTrace();
  std::vector<std::string> command = o.command;
  bool explicitCommand = !command.empty();
  std::string cwd = ti.getCwd().cStr();
  if (!explicitCommand && rankSel) {
    // The rank's own command line, not the launcher's (torchrun would start every rank).
    auto h = stream->header();
    for (auto a : h.getArgv()) command.emplace_back(a.cStr());
    if (h.getCwd().size()) cwd = h.getCwd().cStr();
  } else if (!explicitCommand && o.allRanks && launcher->name() != Trace::kLauncherName) {
    // The ranks must run the recorded command lines exactly: --no_python keeps torchrun from
    // adding its own interpreter flags.
    std::vector<std::string> rankArgv;
    if (StreamReader* r0 = trace->findRank(ranks.ranks.front().rank))
      for (auto a : r0->header().getArgv()) rankArgv.emplace_back(a.cStr());
    std::fprintf(stderr,
                 "dlreplay: this trace was recorded with one dlrecord per rank (torchrun ... dlrecord ...): give the "
                 "launcher command after '--', e.g.\n"
                 "dlreplay:   dlreplay %s --all-ranks -- torchrun --nnodes=1 --nproc_per_node=%d --no_python %s\n",
                 shellQuote(o.trace).c_str(), ranks.worldSize, joinCommand(rankArgv).c_str());
    return kUsage;
  } else if (!explicitCommand) {
    for (auto a : ti.getCommand()) command.emplace_back(a.cStr());
  }
  if (command.empty()) {
    std::fprintf(stderr, "dlreplay: the trace records no command; give one after '--'\n");
    return kCorrupt;
  }
  std::string host = ti.getHost().cStr();
  bool foreign = host != currentHost() || ti.getUid() != ::getuid();
  std::fprintf(stderr, "dlreplay: %s %s\n", o.dryRun ? "would run" : "running", joinCommand(command).c_str());
  if (o.allRanks)
    std::fprintf(stderr, "dlreplay:   in %s, every rank (%zu) replaying its own stream to %s\n", cwd.c_str(),
                 ranks.ranks.size(), target.describe().c_str());
  else
    std::fprintf(stderr, "dlreplay:   in %s, replaying stream %s to %s\n", cwd.c_str(), stream->name().c_str(),
                 target.describe().c_str());
  if (plan.jumpStep >= 0) std::fprintf(stderr, "dlreplay:   %s\n", plan.why.c_str());
  if (rankSel && ranks.origin && ranks.origin->rank != rankSel->rank && rankSel->failureReceived)
    std::fprintf(stderr, "dlreplay: note: rank %d received its non-finite values; they began on %s\n", rankSel->rank,
                 formatOrigin(*ranks.origin).c_str());
  if (foreign && !explicitCommand && !o.yes && !o.dryRun) {
    std::fprintf(stderr,
                 "dlreplay: this trace was recorded by %s on %s, not by you on this host; check the command above,\n"
                 "dlreplay: then rerun with --yes to run it, or give your own command after '--'\n",
                 ti.getUser().cStr(), host.c_str());
    return kConsent;
  }
  if (!o.quiet)
    for (const auto& w : replaycheck::preflightWarnings(*trace, facts))
      std::fprintf(stderr, "dlreplay: warning: %s\n", w.c_str());
  std::error_code ec;
  if (!std::filesystem::is_directory(cwd, ec)) {
    std::fprintf(stderr, "dlreplay: the recorded working directory %s does not exist here\n", cwd.c_str());
    return kIo;
  }

  InstallPaths paths;
  try {
    paths = findInstallPaths();
  } catch (const TraceError& e) {
    std::fprintf(stderr, "dlreplay: %s\n", e.what());
    return kIo;
  }
  std::string traceAbs = std::filesystem::absolute(o.trace, ec).lexically_normal().string();

  // Environment: the recording's, with redacted values taken from ours when we have them.
  std::map<std::string, std::string> env;
  std::set<std::string> redacted;
  for (auto n : ti.getRedactedNames()) redacted.insert(n.cStr());
  for (auto kv : ti.getEnv()) {
    std::string k = kv.getKey().cStr();
    if (redacted.count(k)) {
      if (const char* mine = std::getenv(k.c_str())) env[k] = mine;
      continue;
    }
    env[k] = kv.getValue().cStr();
  }
  for (const char* k : {"TERM", "DISPLAY", "COLUMNS", "LINES"})  // the terminal is ours now
    if (const char* v = std::getenv(k)) env[k] = v;
  auto prepend = [&](const std::string& var, const std::string& first) {
    auto it = env.find(var);
    env[var] = it != env.end() && !it->second.empty() ? first + ":" + it->second : first;
  };
  prepend("LD_PRELOAD", paths.library);
  prepend("PYTHONPATH", paths.pythonHook);
  // GPU capture (docs/gpu.md): CUDA calls our InitializeInjection; a library the recording's
  // environment configured is kept (and launch sequences are then not checked).
  {
    auto it = env.find("CUDA_INJECTION64_PATH");
    std::error_code iec;
    if (it == env.end() || it->second.empty() || std::filesystem::equivalent(it->second, paths.library, iec))
      env["CUDA_INJECTION64_PATH"] = paths.library;
    else
      std::fprintf(stderr,
                   "dlreplay: GPU capture off: another injection library is configured (CUDA_INJECTION64_PATH=%s)\n",
                   it->second.c_str());
  }
  char reportPath[] = "/tmp/dlreplay-report-XXXXXX";
  int reportFd = ::mkstemp(reportPath);
  if (reportFd < 0) {
    std::perror("dlreplay: mkstemp");
    return kIo;
  }
  ::close(reportFd);
  env["DLRR_MODE"] = "replay";
  env["DLRR_TRACE"] = traceAbs;
  env["DLRR_REPLAY_STREAM"] = o.allRanks ? kEachRank : stream->name();
  env.erase("DLRR_DIST_REPLAY");
  if (rankSel) {
    // What torchrun told the rank (RANK, WORLD_SIZE, MASTER_*, OMP_NUM_THREADS, ...).
    for (auto kv : stream->header().getDistEnv())
      if (std::string(kv.getValue().cStr()) != kRedacted) env[kv.getKey().cStr()] = kv.getValue().cStr();
    env["DLRR_DIST_REPLAY"] = "alone";
  } else if (o.allRanks) {
    env["DLRR_DIST_REPLAY"] = "all";
  }
  env["DLRR_UNTIL"] = until;
  env["DLRR_REPORT"] = reportPath;
  if (plan.jumpStep >= 0)
    env["DLRR_JUMP_STEP"] = std::to_string(plan.jumpStep);
  else
    env.erase("DLRR_JUMP_STEP");
  // --all-ranks: each rank writes REPORT.rank<R>; the files exist beforehand (the library
  // never creates one: it writes only where dlreplay asked).
  RankReports rankReports;
  if (o.allRanks)
    for (const auto& r : ranks.ranks) {
      std::string path = std::string(reportPath) + ".rank" + std::to_string(r.rank);
      int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (fd >= 0) {
        ::close(fd);
        rankReports.emplace_back(r.rank, path);
      }
    }
  env["DLRR_LIBRARY"] = paths.library;
  if (!o.debug.empty())
    env["DLRR_DEBUG"] = o.debug;
  else
    env.erase("DLRR_DEBUG");
  if (o.debug.empty() && !o.json && !o.quiet && ::isatty(2))
    env["DLRR_PROGRESS"] = "1";
  else
    env.erase("DLRR_PROGRESS");
  env.erase("DLRR_STATUS_FD");

  ReplayFiles files;  // served files and the scratch directory for the job's writes
  if (!o.dryRun)
    if (int rc = files.prepare(*trace, o, env)) {
      ::unlink(reportPath);
      return rc;
    }

  if (o.dryRun) {
    for (const char* k : {"LD_PRELOAD", "PYTHONPATH", "DLRR_MODE", "DLRR_TRACE", "DLRR_REPLAY_STREAM", "DLRR_UNTIL"})
      std::fprintf(stderr, "dlreplay:   %s=%s\n", k, env[k].c_str());
    ::unlink(reportPath);
    return kOk;
  }

  std::vector<std::string> full = command;
  // Under gdb our child is gdb, whose exit status is not the job's. At the job's first stop gdb
  // writes into this file the signal it stopped at (SIGTRAP: our breakpoint) or died of, and
  // its exit code when it ended instead; the job's status is taken from there.
  char gdbStatusPath[] = "/tmp/dlreplay-gdb-XXXXXX";
  if (o.debug == "gdb") {
    int fd = ::mkstemp(gdbStatusPath);
    if (fd < 0) {
      std::perror("dlreplay: mkstemp");
      ::unlink(reportPath);
      return kIo;
    }
    ::close(fd);
    std::string path = gdbStatusPath;
    env["DLRR_GDB_STATUS"] = path;  // gdb runs with our library too: its write is not the job's
    full = {"gdb", "-q"};
    bool interactive = ::isatty(0);
    if (!interactive) full.push_back("-batch");
    // $_siginfo exists only while the job lives; gdb evaluates one branch of ?: only.
    for (const std::string& c : std::initializer_list<std::string>{
             "set breakpoint pending on", "set confirm off", "break dlrr_replay_stopped", "handle SIGSEGV stop print",
             "run",
             "set $dlrr_signal = !$_isvoid($_exitsignal) ? $_exitsignal : "
             "$_isvoid($_exitcode) ? $_siginfo.si_signo : 0",
             "set $dlrr_exit = $_isvoid($_exitcode) ? -1 : $_exitcode", "dump binary value " + path + " $dlrr_signal",
             "append binary value " + path + " $dlrr_exit"})
      full.insert(full.end(), {"-ex", c});
    if (!interactive) full.insert(full.end(), {"-ex", "bt 30", "-ex", "kill"});
    full.push_back("--args");
    full.insert(full.end(), command.begin(), command.end());
  }
  std::string claimPath = std::string(reportPath) + ".claim." + (stream ? stream->name() : "");  // ReplaySession
  auto removeTemps = [&] {
    ::unlink(reportPath);
    ::unlink(claimPath.c_str());
    if (o.debug == "gdb") ::unlink(gdbStatusPath);
  };
  std::vector<std::string> envStrings;
  for (auto& [k, v] : env) envStrings.push_back(k + "=" + v);
  tools::LaunchSpec spec;
  spec.argv = full;
  spec.env = envStrings;
  spec.cwd = cwd;
  spec.passSignalsOn = o.debug != "pdb" && o.debug != "gdb";  // an interactive debugger owns Ctrl-C
  tools::ChildResult child;
  try {
    child = tools::launch(spec);
  } catch (const std::system_error& e) {
    std::fprintf(stderr, "dlreplay: cannot start the job: %s\n", e.what());
    removeTemps();
    return kIo;
  }
  if (child.execError != 0) {
    std::fprintf(stderr, "dlreplay: cannot run '%s': %s\n", full[0].c_str(), std::strerror(child.execError));
    removeTemps();
    return child.execError == ENOENT ? 127 : 126;
  }
  int status = child.waitStatus;
  if (o.allRanks) {
    ::unlink(reportPath);
    if (!o.json) files.print(stderr);
    return allRanksOutcome(ranks, rankReports, status, o.json);
  }
  ::unlink(claimPath.c_str());
  auto report = readReport(reportPath);
  if (o.debug == "gdb") {
    int32_t job[2] = {0, -1};  // signal, exit code
    std::ifstream in(gdbStatusPath, std::ios::binary);
    if (in.read(reinterpret_cast<char*>(job), sizeof job)) {
      if (job[0] > 0 && job[0] < 128 && job[0] != SIGTRAP)
        status = W_EXITCODE(0, job[0]);  // ended in gdb there
      else if (job[1] >= 0 && job[1] < 256)
        status = W_EXITCODE(job[1], 0);
    }
  }
  removeTemps();

  // Outcome.
  ReplayFacts rf;
  rf.report = report;
  rf.waitStatus = status;
  rf.target = target.kind;
  rf.targetText = target.describe();
  rf.recordedSteps = sum.steps;
  if (sum.failure) {
    rf.recordedFailureKind = sum.failure->kind;
    rf.recordedSignal = sum.failure->signal;
  }
  rf.recordedExit = facts.exitCode;
  rf.jumpStep = plan.jumpStep;
  const ReplayOutcome decided = decideReplayOutcome(rf);
  int exitCode = decided.exitCode;
  const std::string& outcome = decided.message;
  bool died = WIFSIGNALED(status);
  int sig = died ? WTERMSIG(status) : 0;
  std::string verified = report.count("verified_steps") ? report["verified_steps"] : "0";

  // --check: the verdict on determinism, and what triage says about this kind of failure.
  std::string verdict;
  bool reproduced = false;
  triage::TriageResult tri = triage::classify(facts);
  if (o.check) {
    int childStatus = WIFEXITED(status) ? WEXITSTATUS(status) : died ? 128 + sig : -1;
    if (checkExit)
      reproduced = exitCode == kOk && facts.exitCode && childStatus == *facts.exitCode;
    else
      reproduced = exitCode == kOk;
    std::string what = sum.failure ? tools::printableSummary(formatFailure(*sum.failure), kSummaryTextMax)
                                   : "exit status " + std::to_string(facts.exitCode.value_or(-1));
    if (reproduced) {
      std::string stopStep = report.count("stop.step") ? report["stop.step"] : "";
      if (checkExit) stopStep = std::to_string(std::strtoll(verified.c_str(), nullptr, 10) - 1);
      verdict = "deterministic: reproduced " + replaycheck::stepPhrase(stopStep, facts) + " (" + what + ")";
    } else {
      std::string why = checkExit && exitCode == kOk
                            ? "the replayed job ended with status " + std::to_string(childStatus) +
                                  ", the recording with " + std::to_string(facts.exitCode.value_or(-1))
                            : outcome;
      verdict = "not reproduced: " + why;
      if (plan.jumpStep >= 0 && exitCode != kNoReplay)
        verdict += "; from the snapshot of step " + std::to_string(plan.jumpStep) +
                   ", on the same build: a transient fault (a hardware check is advised) unless state the snapshot "
                   "cannot hold changed the result (--check --from start replays every step)";
      if (exitCode != kNoReplay) exitCode = kNotReproduced;
    }
  }
  // One verdict: a replay that did not reproduce the failure shows no determinism, whatever
  // the failure's kind usually is.
  const bool unshown = o.check && !reproduced && tri.determinism == triage::Determinism::Deterministic;
  if (unshown) tri.determinism = triage::Determinism::Unknown;
  if (o.json) {
    std::string out;
    tools::JsonWriter j(out, 0);  // one line, after whatever the job printed
    j.beginObject();
    j.field("outcome", exitCode == kOk           ? "reached"
                       : exitCode == kDivergence ? "divergence"
                       : exitCode == kNoReplay   ? "not-attached"
                                                 : "not-reached");
    j.field("exit_code", exitCode);
    j.field("target", target.describe());
    j.field("message", outcome);
    j.field("verified_steps", std::strtoll(verified.c_str(), nullptr, 10));
    j.field("recorded_steps", static_cast<long long>(sum.steps));
    j.field("jump_step", static_cast<long long>(plan.jumpStep));
    if (o.check) {
      j.key("check").beginObject();
      j.field("reproduced", reproduced);
      j.field("verdict", verdict);
      j.field("category", std::string(triage::categoryInfo(tri.category).id));
      j.field("determinism", std::string(triage::determinismId(tri.determinism)));
      j.endObject();
    }
    j.key("report").beginObject();
    for (auto& [k, v] : report) j.field(k, v);
    j.endObject();
    files.json(j);
    j.endObject();
    std::printf("%s\n", out.c_str());
  } else {
    std::string jumped = plan.jumpStep < 0 ? ""
                                           : " (jumped to step " + std::to_string(plan.jumpStep) +
                                                 ": steps before it were fast-forwarded, not verified)";
    std::fprintf(stderr, "dlreplay: %s; %s of %llu recorded steps verified bit-exact%s\n", outcome.c_str(),
                 verified.c_str(), static_cast<unsigned long long>(sum.steps), jumped.c_str());
    if (o.check) {
      const auto& ci = triage::categoryInfo(tri.category);
      std::fprintf(stderr, "dlreplay: %s\n", verdict.c_str());
      const char* kind = tri.determinism == triage::Determinism::Deterministic ? ", a deterministic kind of failure"
                         : tri.determinism == triage::Determinism::NonDeterministic
                             ? ", a non-deterministic kind of failure"
                             : "";
      if (unshown)
        std::fprintf(stderr, "dlreplay: triage: %s [%s]; determinism not known: this replay did not reproduce it\n",
                     ci.name, triage::dimensionName(tri.dimension));
      else
        std::fprintf(stderr, "dlreplay: triage: %s [%s]%s%s%s%s\n", ci.name, triage::dimensionName(tri.dimension), kind,
                     *ci.why ? " (" : "", ci.why, *ci.why ? ")" : "");
      if (tri.determinism == triage::Determinism::NonDeterministic && reproduced)
        std::fprintf(stderr, "dlreplay: it reproduced here; on another node or with other co-tenants it may not\n");
    }
    for (auto& [k, v] : report) {
      if (k.rfind("stop.", 0) == 0 || k.rfind("batch.", 0) == 0 || k.rfind("backward.", 0) == 0 ||
          k.rfind("env.", 0) == 0 || k.rfind("launch.", 0) == 0 || k.rfind("gpu.", 0) == 0 ||
          k.rfind("verify.", 0) == 0 ||  // what this replay could not verify (torch.compile'd submodules)
          (k.rfind("dist.", 0) == 0 && k != "dist.rank")) {
        std::string name = k.substr(k.find('.') + 1);
        if (k == "stop.step" && v == "-") {  // it stopped between steps: say which, not "-"
          std::fprintf(stderr, "dlreplay:   step: %s\n",
                       decided.verified
                           ? ("none open (after step " + std::to_string(decided.verified - 1) + ")").c_str()
                           : "none (before the first step)");
          continue;
        }
        if (k == "stop.where") {  // may end in an exception's message: one line
          std::fprintf(stderr, "dlreplay:   %s: %s\n", name.c_str(),
                       tools::printableSummary(v, kSummaryTextMax).c_str());
          continue;
        }
        size_t start = 0;  // a repeated key (batch.samples) holds one value a line
        while (start < v.size()) {
          size_t nl = v.find('\n', start);
          if (nl == std::string::npos) nl = v.size();
          std::fprintf(stderr, "dlreplay:   %s: %s\n", name.c_str(),
                       tools::printable(std::string_view(v).substr(start, nl - start)).c_str());
          start = nl + 1;
        }
      }
    }
    files.print(stderr);
    if (report.count("warning")) {
      size_t start = 0;
      const std::string& w = report["warning"];
      while (start < w.size()) {
        size_t nl = w.find('\n', start);
        if (nl == std::string::npos) nl = w.size();
        std::fprintf(stderr, "dlreplay: warning: %s\n",
                     tools::printable(std::string_view(w).substr(start, nl - start)).c_str());
        start = nl + 1;
      }
    }
  }
  return exitCode;
}

}  // namespace
}  // namespace dlrr

int main(int argc, char** argv) {
  // Whatever a trace holds, dlreplay ends with one line and a documented exit code.
  try {
    return dlrr::run(argc, argv);
  } catch (const dlrr::TraceError& e) {
    std::fprintf(stderr, "dlreplay: %s\n", e.what());
    return dlrr::exitFor(e.kind());
  } catch (const kj::Exception& e) {
    std::fprintf(stderr, "dlreplay: trace data does not parse: %s\n", e.getDescription().cStr());
    return dlrr::kCorrupt;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "dlreplay: out of memory reading the trace\n");
    return dlrr::kCorrupt;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dlreplay: internal error: %s\n", e.what());
    return dlrr::kInternal;
  }
}
