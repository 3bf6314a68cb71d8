// dlreplay [options] TRACE [--until TARGET] [--debug pdb|gdb|wait] [-- CMD ...]
//
// Re-runs the recorded job in replay mode: the recorded environment and thread settings,
// entropy, batches and RNG states served from the trace, every step checked against the
// recording, and a stop at the target. It shows the command before running it, and never
// runs the command of a trace from another host or user without consent.
#include <fcntl.h>
#include <kj/exception.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "format/Trace.h"
#include "format/TraceError.h"
#include "format/Version.h"
#include "replayer/ReplayReport.h"
#include "replayer/ReplaySession.h"
#include "session/HostInfo.h"
#include "tools/common/ChildProcess.h"
#include "tools/common/ExitCodes.h"
#include "tools/common/Text.h"
#include "tools/dlrecord/InstallPaths.h"
#include "tools/dlreplay/AllRanksOutcome.h"
#include "tools/dlreplay/Check.h"
#include "tools/dlreplay/GdbLaunch.h"
#include "tools/dlreplay/RankLaunch.h"
#include "tools/dlreplay/Recomputation.h"
#include "tools/dlreplay/ReplayEnvironment.h"
#include "tools/dlreplay/ReplayFiles.h"
#include "tools/dlreplay/ReplayOptions.h"
#include "tools/dlreplay/ReplayOutcome.h"
#include "tools/dlreplay/ReplayPrint.h"
#include "tools/dlreplay/ReplaySelection.h"
#include "tools/dlreplay/ScratchDirs.h"
#include "tools/dlreplay/SourceCheck.h"
#include "tools/dlreplay/TraceEnd.h"
#include "tools/dlreplay/TraceOrigin.h"
#include "tools/dlreplay/WhatIf.h"
#include "triage/Classifier.h"
#include "triage/Ranks.h"

namespace dlrr {
namespace {

bool haveCudaDevice() {
  for (const char* p : {"/dev/nvidiactl", "/proc/driver/nvidia/version", "/dev/dxg"})
    if (::access(p, F_OK) == 0) return true;
  return false;
}

// A private temporary file (mkstemp), removed when dlreplay is done with it.
class TempFile {
 public:
  explicit TempFile(const char* pattern) : path_(pattern) {
    int fd = ::mkstemp(path_.data());
    if (fd < 0) {
      path_.clear();
      return;
    }
    ::close(fd);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A private temporary directory (mkdtemp) for dlreplay's own files (the report and its
// siblings), removed with what is in it when dlreplay is done: the one place the replayed job
// writes through its sandbox to.
class TempDir {
 public:
  explicit TempDir(const char* pattern) : path_(pattern) {
    if (!::mkdtemp(path_.data())) path_.clear();
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string summarizeNames(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

void say(const std::vector<std::string>& lines) {
  for (const auto& l : lines) std::fprintf(stderr, "dlreplay: %s\n", l.c_str());
}

// What dlreplay shows before running anything (the command, where, to what target), and the
// consent a foreign trace needs. Returns 0 to go on, else the exit code.
// Every recorded string printed goes through printable(): a trace cannot erase or fake the
// line the user is asked to check with terminal escapes.
int announce(const ReplaySelection& s, const ReplayOptions& o, Trace& trace, int rankPort, const TraceOrigin& origin) {
  using tools::printable;
  for (const auto& l : s.rankLaunches)
    std::fprintf(stderr, "dlreplay: %s rank %d: %s\n", o.dryRun ? "would run" : "running", l.rank,
                 printable(tools::joinCommand(l.argv)).c_str());
  if (s.rankLaunches.empty())
    std::fprintf(stderr, "dlreplay: %s %s\n", o.dryRun ? "would run" : "running",
                 printable(tools::joinCommand(s.command)).c_str());
  if (!s.rankLaunches.empty())
    std::fprintf(stderr,
                 "dlreplay:   in %s, every rank (%zu) started by dlreplay as it was started (by hand, no launcher "
                 "recorded), meeting at 127.0.0.1:%d, each replaying its own stream to %s\n",
                 printable(s.cwd).c_str(), s.rankLaunches.size(), rankPort, s.target.describe().c_str());
  else if (s.allRanks && s.ranks.spansMachines())
    std::fprintf(stderr,
                 "dlreplay:   in %s, every rank recorded on this machine (%d of world size %d) replaying its own "
                 "stream to %s; the other machines' ranks replay from their own traces (their dlreplay, started "
                 "at the same time)\n",
                 printable(s.cwd).c_str(), s.ranks.ranksHere(), s.ranks.worldSize, s.target.describe().c_str());
  else if (s.allRanks)
    std::fprintf(stderr, "dlreplay:   in %s, every rank (%zu) replaying its own stream to %s\n",
                 printable(s.cwd).c_str(), s.ranks.ranks.size(), s.target.describe().c_str());
  else
    std::fprintf(stderr, "dlreplay:   in %s, replaying stream %s to %s\n", printable(s.cwd).c_str(),
                 printable(s.stream->name()).c_str(), s.target.describe().c_str());
  if (s.jump.jumpStep >= 0) std::fprintf(stderr, "dlreplay:   %s\n", s.jump.why.c_str());
  // Several trainers at once, or processes that were not recorded: said once, before the
  // verdict, which is about this stream only.
  if (!s.concurrencyCaveat.empty() && !o.quiet)
    std::fprintf(stderr, "dlreplay: note: %s\n", s.concurrencyCaveat.c_str());
  if (s.stream)
    for (const auto& w : changedSources(*s.stream)) std::fprintf(stderr, "dlreplay: warning: %s\n", w.c_str());
  if (s.rank && s.ranks.origin && s.ranks.origin->rank != s.rank->rank && s.rank->failureReceived)
    std::fprintf(stderr, "dlreplay: note: rank %d received its non-finite values; they began on %s\n", s.rank->rank,
                 formatOrigin(*s.ranks.origin).c_str());
  if (origin.foreign && !s.explicitCommand && !o.yes && !o.dryRun) {
    std::fprintf(stderr,
                 "dlreplay: this trace is not yours: %s; check the command above,\n"
                 "dlreplay: then rerun with --yes to run it, or give your own command after '--'\n",
                 origin.why.c_str());
    return kExitConsent;
  }
  if (!o.quiet)
    for (const auto& w : replaycheck::preflightWarnings(trace, s.facts))
      std::fprintf(stderr, "dlreplay: warning: %s\n", w.c_str());
  std::error_code ec;
  if (!std::filesystem::is_directory(s.cwd, ec)) {
    std::fprintf(stderr, "dlreplay: the recorded working directory %s does not exist here\n", s.cwd.c_str());
    return kExitIo;
  }
  return 0;
}

// --all-ranks: each rank writes REPORT.rank<R>; the files exist beforehand (the library never
// creates one: it writes only where dlreplay asked).
RankReports makeRankReports(const RankReport& ranks, const std::string& reportPath) {
  RankReports out;
  for (const auto& r : ranks.ranks) {
    std::string path = reportPath + ".rank" + std::to_string(r.rank);
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) {
      ::close(fd);
      out.emplace_back(r.rank, path);
    }
  }
  return out;
}

// --all-ranks of hand-started ranks (RankLaunch.h): every rank at once; one ending otherwise
// than recorded stops the others (they would wait for it); then the per-rank verdict.
int runRanks(const ReplaySelection& s, const ReplayOptions& o, const Environment& env, ReplayFiles& files,
             const RankReports& rankReports, int port) {
  std::vector<tools::LaunchSpec> specs = rankLaunchSpecs(s, env, port);
  std::vector<tools::ChildResult> children;
  try {
    children = tools::launchAll(specs, [&](size_t i, int status) { return !endsAsRecorded(s, i, status); });
  } catch (const std::system_error& e) {
    std::fprintf(stderr, "dlreplay: cannot start the ranks: %s\n", e.what());
    return kExitIo;
  }
  for (size_t i = 0; i < children.size(); ++i)
    if (children[i].execError != 0) {
      std::fprintf(stderr, "dlreplay: cannot run rank %d's '%s': %s\n", s.rankLaunches[i].rank,
                   s.rankLaunches[i].argv[0].c_str(), std::strerror(children[i].execError));
      return children[i].execError == ENOENT ? kExitCannotRun : kExitNotExecutable;
    }
  ProcessEnd end = rankEnd(s, children);
  if (!o.json) files.print(stderr);
  return allRanksOutcome(s.ranks, rankReports, end, o.json);
}

// A diverged jump replay, computed a second time from the same snapshot (Recomputation.h): the
// same command and settings, a report and a scratch directory of its own (the first run's writes
// must not change what it computes), its output discarded (the job's output was shown once).
Recomputation recomputeFromSnapshot(Trace& trace, const ReplayOptions& o, Environment env, const std::string& dir,
                                    const tools::LaunchSpec& first, const std::string& stream,
                                    const ReplayReport::Divergence& divergence, const std::string& weakWhy) {
  TempFile report((dir + "/report-XXXXXX").c_str());
  if (!report.ok()) return {};
  env["DLRR_REPORT"] = report.path();
  std::fflush(stdout);
  std::fflush(stderr);
  const int savedOut = ::dup(1), savedErr = ::dup(2), null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (savedOut < 0 || savedErr < 0 || null < 0) {
    for (int fd : {savedOut, savedErr, null})
      if (fd >= 0) ::close(fd);
    return {};
  }
  ::dup2(null, 1);
  ::dup2(null, 2);
  tools::ChildResult child;
  bool ran = false;
  {
    ReplayFiles files;
    if (files.prepare(trace, o, env, {dir}, weakWhy) == 0) {
      tools::LaunchSpec spec = first;
      spec.env = environmentStrings(env);
      spec.sandbox = files.sandbox();
      try {
        child = tools::launch(spec);
        ran = child.execError == 0;
      } catch (
          const std::system_error&) {  // best effort: not started: `ran` stays false and the failure is reported below
      }
      files.discard();
    }
  }
  std::fflush(stdout);
  std::fflush(stderr);
  ::dup2(savedOut, 1);
  ::dup2(savedErr, 2);
  for (int fd : {savedOut, savedErr, null}) ::close(fd);
  ::unlink((report.path() + ".claim." + stream).c_str());
  if (!ran) return {};
  removeReplayReportTemporaries(report.path());
  ReplayReport second = readReplayReportFile(report.path());
  const bool ok = WIFEXITED(child.waitStatus) && !second.divergence && !second.exception;
  return compareComputations(divergence, second, ok);
}

int run(int argc, char** argv) {
  ReplayOptions o;
  try {
    o = parseReplayOptions(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const tools::UsageError& e) {
    tools::printUsageError("dlreplay", e);
    return kExitUsage;
  }
  if (o.action == ReplayOptions::Action::Help) {
    std::fputs(kReplayUsage, stdout);
    return kExitOk;
  }
  if (o.action == ReplayOptions::Action::Version) {
    std::printf("dlreplay %s\n", kDlrrVersion);
    return kExitOk;
  }
  if (o.action == ReplayOptions::Action::CleanScratch) {
    ScratchSweep s = sweepScratch(scratchParent(), std::nullopt);
    for (const auto& d : s.removed) std::printf("removed %s\n", tools::printable(d).c_str());
    for (const auto& d : s.inUse) std::printf("in use by a running replay, kept: %s\n", tools::printable(d).c_str());
    std::printf("dlreplay: removed %zu scratch director%s in %s (%s)\n", s.removed.size(),
                s.removed.size() == 1 ? "y" : "ies", tools::printable(scratchParent()).c_str(),
                tools::humanBytes(s.bytes).c_str());
    return kExitOk;
  }

  // 1. What to replay: decided from the trace before anything runs (ReplaySelection.h).
  std::unique_ptr<Trace> trace;
  try {
    trace = Trace::open(o.trace, OpenMode::Tolerant);
    for (const auto& b : trace->broken())
      std::fprintf(stderr, "dlreplay: warning: stream %s skipped: %s\n", b.name.c_str(), b.message.c_str());
  } catch (const TraceError& e) {
    std::fprintf(stderr, "dlreplay: %s\n", e.what());
    return exitCodeFor(e.kind());
  }
  SelectionResult selected = selectReplay(*trace, o, haveCudaDevice());
  say(selected.notes);
  if (!selected.selection) {
    say(selected.refusal.lines);
    return selected.refusal.exitCode;
  }
  const ReplaySelection& s = *selected.selection;
  int rankPort = 0;  // where hand-started ranks meet (MASTER_PORT): a free one here, not the recorded one
  if (!s.rankLaunches.empty()) rankPort = freeLocalPort();
  if (!s.rankLaunches.empty() && rankPort <= 0) {
    std::perror("dlreplay: no free local port for the ranks' rendezvous");
    return kExitIo;
  }
  const TraceOrigin origin = traceOrigin(o.trace, s.launcher->header().getTrace(), hostName());
  if (int rc = announce(s, o, *trace, rankPort, origin)) return rc;

  // 2. The job's environment (ReplayEnvironment.h).
  InstallPaths paths;
  try {
    paths = findInstallPaths();
  } catch (const TraceError& e) {
    std::fprintf(stderr, "dlreplay: %s\n", e.what());
    return kExitIo;
  }
  std::string gpuNote;
  // A foreign trace's environment does not choose the code the replay loads, unless consented.
  std::vector<std::string> withheld;
  Environment env = recordedEnvironment(
      s.launcher->header().getTrace(), paths, [](const char* k) { return std::getenv(k); }, gpuNote,
      !origin.foreign || o.yes, &withheld);
  if (!gpuNote.empty()) std::fprintf(stderr, "dlreplay: %s\n", tools::printable(gpuNote).c_str());
  if (!withheld.empty())
    std::fprintf(stderr, "dlreplay: note: %s are this machine's, not the trace's (%s; --yes uses the trace's)\n",
                 tools::printable(summarizeNames(withheld)).c_str(), origin.why.c_str());
  TempDir own("/tmp/dlreplay-own-XXXXXX");
  if (!own.ok()) {
    std::perror("dlreplay: mkdtemp");
    return kExitIo;
  }
  TempFile report((own.path() + "/report-XXXXXX").c_str());
  if (!report.ok()) {
    std::perror("dlreplay: mkstemp");
    return kExitIo;
  }
  ReplaySettings settings;
  std::error_code ec;
  settings.trace = std::filesystem::absolute(o.trace, ec).lexically_normal().string();
  settings.stream = s.allRanks ? kEachRank : s.stream->name();
  if (s.rank) {
    settings.rankAlone = true;
    for (auto kv : s.stream->header().getDistEnv())
      settings.rankEnv.emplace_back(kv.getKey().cStr(), kv.getValue().cStr());
  }
  settings.allRanks = s.allRanks;
  settings.until = s.until;
  settings.reportPath = report.path();
  settings.jumpStep = s.jump.jumpStep;
  settings.library = paths.library;
  settings.debug = o.debug;
  settings.withoutData = o.withoutData;
  settings.progress = o.debug.empty() && !o.json && !o.quiet && ::isatty(2);
  if (!o.whatIf.empty()) {
    // The change starts at the failing step, or where --from asked verification to start.
    settings.whatIf = o.whatIf;
    int64_t failing = s.summary.failure ? s.summary.failure->step : 0;
    settings.whatIfFrom = o.from.empty() || o.from == "snapshot" ? failing : std::max<int64_t>(s.jump.jumpStep, 0);
    settings.whatIfSteps = o.whatIfSteps.value_or(0);
  }
  applyReplaySettings(env, settings);
  if (o.dryRun) {
    for (const char* k : {"LD_PRELOAD", "PYTHONPATH", "DLRR_MODE", "DLRR_TRACE", "DLRR_REPLAY_STREAM", "DLRR_UNTIL"})
      std::fprintf(stderr, "dlreplay:   %s=%s\n", k, tools::printable(env[k]).c_str());
    return kExitOk;
  }
  const Environment envBeforeFiles = env;  // for a second computation (recomputeFromSnapshot)
  ReplayFiles files;                       // served files and the scratch directory for the job's writes
  // Every process of the job in a sandbox (tools/common/Sandbox.h), but where one cannot hold
  // what the replay needs.
  std::string weakWhy = !s.rankLaunches.empty() ? "the ranks dlreplay starts by hand do not share one sandbox yet"
                        : o.debug == "wait"     ? "--debug wait: a debugger attaches to the job from outside"
                                                : "";
  if (int rc = files.prepare(*trace, o, env, {own.path()}, weakWhy)) return rc;
  RankReports rankReports;
  if (s.allRanks) rankReports = makeRankReports(s.ranks, report.path());

  // 3. Run it (under gdb for --debug gdb: GdbLaunch.h).
  std::vector<std::string> full = s.command;
  std::optional<TempFile> gdbStatus;
  if (o.debug == "gdb") {
    gdbStatus.emplace((own.path() + "/gdb-XXXXXX").c_str());
    if (!gdbStatus->ok()) {
      std::perror("dlreplay: mkstemp");
      return kExitIo;
    }
    env["DLRR_GDB_STATUS"] = gdbStatus->path();  // gdb runs with our library too: its write is not the job's
    full = gdbCommand(s.command, gdbStatus->path(), ::isatty(0));
  }
  if (!s.rankLaunches.empty()) return runRanks(s, o, env, files, rankReports, rankPort);
  // ReplaySession's claim on the stream, next to the report.
  const std::string claimPath = report.path() + ".claim." + s.stream->name();
  tools::LaunchSpec spec;
  spec.argv = full;
  spec.env = environmentStrings(env);
  spec.cwd = s.cwd;
  spec.passSignalsOn = o.debug != "pdb" && o.debug != "gdb";  // an interactive debugger owns Ctrl-C
  spec.sandbox = files.sandbox();
  tools::ChildResult child;
  try {
    child = tools::launch(spec);
  } catch (const std::system_error& e) {
    std::fprintf(stderr, "dlreplay: cannot start the job: %s\n", e.what());
    ::unlink(claimPath.c_str());
    return kExitIo;
  }
  ::unlink(claimPath.c_str());
  if (child.execError != 0) {
    std::fprintf(stderr, "dlreplay: cannot run '%s': %s\n", full[0].c_str(), std::strerror(child.execError));
    return child.execError == ENOENT ? 127 : 126;
  }
  int status = child.waitStatus;
  removeReplayReportTemporaries(report.path());  // a writer killed between its write and its rename
  if (s.allRanks) {
    if (!o.json) files.print(stderr);
    ProcessEnd end;
    end.waitStatus = status;
    // torchrun's recorded status, when it is torchrun that runs again (a launcher given after
    // '--' for one dlrecord per rank has no recorded status to compare with).
    if (!s.explicitCommand && s.launcher->name() == Trace::kLauncherName) end.recordedExit = s.facts.exitCode;
    return allRanksOutcome(s.ranks, rankReports, end, o.json);
  }
  if (gdbStatus) status = jobStatusUnderGdb(gdbStatus->path(), status);

  // 4. The outcome (ReplayOutcome.h), --check's verdict (Check.h), and what is printed.
  if (!o.whatIf.empty()) {  // its own verdict: the steps with the change are not a replay's to verify
    ReplayReport wr = readReplayReportFile(report.path());
    WhatIfOutcome wo = decideWhatIf(wr, status, o.whatIf);
    if (o.json)
      printWhatIfJson(wr, wo, o.whatIf, files);
    else
      printWhatIfText(wr, wo, files);
    return wo.exitCode;
  }
  ReplayResult r;
  r.report = readReplayReportFile(report.path());
  ReplayFacts rf;
  rf.report = r.report;
  rf.waitStatus = status;
  rf.target = s.target.kind;
  rf.targetText = s.target.describe();
  rf.recordedSteps = s.summary.steps;
  // How the recorded process ended: its exception or signal, also when a NaN came first.
  if (const auto& ended = s.summary.crash ? s.summary.crash : s.summary.failure) {
    rf.recordedFailureKind = ended->kind;
    rf.recordedSignal = ended->signal;
    rf.recordedExceptionType = ended->exceptionType;
  }
  rf.recordedExit = s.facts.exitCode;
  rf.jumpStep = s.jump.jumpStep;
  for (const auto& n : s.summary.notes)
    if (rf.plainBatches.empty() && n.find(kPlainBatchNote) != std::string::npos) rf.plainBatches = n;
  for (const auto& p : s.summary.processes)
    if (s.stream && p.name == s.stream->name()) rf.traceCut = traceCutReason(p, s.summary.exitCode, s.summary.notes);
  // Diverged after a jump: is the step's computation itself non-deterministic? (not under a
  // debugger, which the second run would start again)
  if (r.report.divergence && s.jump.jumpStep >= 0 && o.debug.empty()) {
    if (!o.json && !o.quiet)
      std::fprintf(stderr,
                   "dlreplay: diverged after the jump: computing again from the snapshot of step %lld to tell "
                   "a non-deterministic computation from state the snapshot does not hold\n",
                   static_cast<long long>(s.jump.jumpStep));
    rf.recomputation = recomputeFromSnapshot(*trace, o, envBeforeFiles, own.path(), spec, s.stream->name(),
                                             *r.report.divergence, weakWhy);
  }
  r.outcome = decideReplayOutcome(rf);
  r.exitCode = r.outcome.exitCode;
  r.target = s.target.describe();
  r.recordedSteps = s.summary.steps;
  r.jumpStep = s.jump.jumpStep;
  r.determinism = s.concurrencyCaveat;
  r.triage = triage::classify(s.facts);
  if (o.check) {
    replaycheck::CheckInput ci;
    ci.replayExit = r.outcome.exitCode;
    ci.replayMessage = r.outcome.message;
    ci.waitStatus = status;
    ci.report = r.report;
    ci.checkExit = s.checkExit;
    if (s.summary.failure) ci.recordedFailure = formatFailure(*s.summary.failure);
    ci.jumpStep = s.jump.jumpStep;
    ci.nonDeterministic = !rf.recomputation.differsAt.empty();
    ci.concurrencyCaveat = s.concurrencyCaveat;
    r.check = replaycheck::decideCheck(ci, s.facts);
    r.exitCode = r.check->exitCode;
    // One verdict: a replay that did not reproduce the failure shows no determinism, whatever
    // the failure's kind usually is.
    if (!r.check->reproduced && r.triage.determinism == triage::Determinism::Deterministic) {
      r.determinismUnshown = true;
      r.triage.determinism = triage::Determinism::Unknown;
    }
  }
  if (o.json)
    printReplayJson(r, files);
  else
    printReplayText(r, files);
  return r.exitCode;
}

}  // namespace
}  // namespace dlrr

int main(int argc, char** argv) {
  // Whatever a trace holds, dlreplay ends with one line and a documented exit code.
  try {
    return dlrr::run(argc, argv);
  } catch (const dlrr::TraceError& e) {
    std::fprintf(stderr, "dlreplay: %s\n", e.what());
    return dlrr::exitCodeFor(e.kind());
  } catch (const kj::Exception& e) {
    std::fprintf(stderr, "dlreplay: trace data does not parse: %s\n", e.getDescription().cStr());
    return dlrr::kExitCorrupt;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "dlreplay: out of memory reading the trace\n");
    return dlrr::kExitCorrupt;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dlreplay: internal error: %s\n", e.what());
    return dlrr::kExitInternal;
  }
}
