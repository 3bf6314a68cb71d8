#include "tools/dlreplay/ReplaySelection.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <limits>
#include <string_view>

#include "format/StreamBatchMap.h"
#include "format/TraceError.h"
#include "format/ValueBlobs.h"
#include "tools/common/Text.h"
#include "tools/dlreplay/ReplayOutcome.h"
#include "triage/Classifier.h"
#include "triage/Concurrency.h"
#include "triage/TraceFacts.h"

namespace dlrr {
namespace {

SelectionResult refuse(SelectionResult r, int code, std::vector<std::string> lines) {
  r.selection.reset();
  r.refusal = {code, std::move(lines)};
  return r;
}

// What of a GPU the stream used ("" when none): its process initialised CUDA, or its
// collectives went through NCCL.
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
  } catch (const TraceError&) {  // best effort: damaged: what precedes the damage tells
  }
  if (!initialised && backend != "nccl") return "";
  std::string what = device.empty() ? std::string("a CUDA device") : device;
  if (backend == "nccl") what += ", NCCL";
  return what;
}

bool recordsNonFinite(Trace& trace) {
  bool any = false;
  for (auto& s : trace.streams()) {
    try {
      s->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
        any = any || (e.isFailure() && e.getFailure().getKind() == schema::Failure::Kind::NONFINITE);
      });
    } catch (const TraceError&) {  // best effort: damage: what precedes it was searched
    }
  }
  return any;
}

std::vector<SnapshotInfo> snapshotsOf(StreamReader& stream) {
  std::vector<SnapshotInfo> snaps;
  try {
    stream.forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
      // A budgeted trace may have dropped a snapshot's tensors (its bulk file): a jump cannot start there.
      if (e.isSnapshot() && valueBlobsPresent(stream, e.getSnapshot().getValue()))
        snaps.push_back({e.getSnapshot().getStep(), e.getSnapshot().getReason() == schema::Snapshot::Reason::FAILURE});
    });
  } catch (const TraceError&) {  // best effort: damage: the snapshots before it are usable
  }
  return snaps;
}

std::string stepsText(int64_t first, int64_t last) {
  auto one = [](int64_t s) { return s < 0 ? std::string("start-up") : std::to_string(s); };
  return first == last ? "step " + one(first) : "steps " + one(first) + "-" + one(last);
}

// --without-data: every batch from the start (the jump step, or the job's first step) to the
// target (or the last batch) must have its bytes in the trace. Checked here, before anything
// runs, rather than when the replay reaches a batch it cannot serve: a jump to a periodic
// snapshot outside the window would otherwise start, and the job's own pipeline could not
// re-make a batch whose dataset is gone.
bool servableWithoutData(StreamReader& stream, int64_t jumpStep, int64_t targetStep, std::string& err) {
  BatchMap map = batchMapOf(stream);
  if (map.lastStep < 0 || map.bytesMissing == 0) return true;  // no batches, or every one held
  int64_t from = jumpStep > 0 ? jumpStep : 0;
  int64_t to = targetStep >= 0 ? std::min(targetStep, map.lastStep) : map.lastStep;
  const BatchMap::Range* in = map.rangeOf(from);
  if (in && to <= in->last) return true;
  err = "not replayable without the dataset: " + stepsText(from, to) +
        (from > 0 ? " (from the snapshot of step " + std::to_string(from) + ")" : "") +
        " use batches recorded by reference whose bytes the trace does not hold. This trace: " + map.describe() +
        ". Replay with the dataset present (without --without-data), or choose a start inside a range above "
        "(--from step=N)";
  return false;
}

// A rank alone is served every collective result of the steps it verifies: from the jump
// step (or the start) to the target's step (or the end). A recording with digest collectives
// and a --window holds them for the failure window only (docs/distributed.md).
bool rankCanRunAlone(const RankStatus& rk, int64_t jumpStep, int64_t targetStep, std::string& err) {
  int64_t from = jumpStep > 0 ? jumpStep : std::numeric_limits<int64_t>::min();
  int64_t to = targetStep >= 0 ? targetStep : std::numeric_limits<int64_t>::max();
  for (const auto& [first, last] : rk.unkeptSteps) {
    if (last < from || first > to) continue;
    std::string kept;
    int64_t prev = std::numeric_limits<int64_t>::min();
    for (const auto& [f, l] : rk.unkeptSteps) {  // the kept steps lie between the unkept ranges
      if (prev != std::numeric_limits<int64_t>::min() && f > prev + 1)
        kept += (kept.empty() ? "" : ", ") + stepsText(prev + 1, f - 1);
      prev = l;
    }
    err = "rank " + std::to_string(rk.rank) + " cannot run alone " +
          (jumpStep > 0 ? "from the snapshot of step " + std::to_string(jumpStep) : std::string("from the start")) +
          (targetStep >= 0 ? " to step " + std::to_string(targetStep) : std::string(" to the end")) +
          ": the recording kept only the digests of its collective results of " + stepsText(first, last) +
          (kept.empty() ? std::string()
                        : " (digest collectives with --window: results kept for the failure window, " + kept + ")") +
          "; replay the window from its snapshot (--from snapshot or --from step=N), record with "
          "'dlrecord --collectives full', or replay every rank with --all-ranks";
    return false;
  }
  return true;
}

// Distributed traces (docs/distributed.md): one rank alone, or all of them. Returns false
// (with the refusal set) when the options ask for what the trace cannot give.
bool chooseRank(Trace& trace, ReplayOptions& o, SelectionResult& r, ReplaySelection& s) {
  s.ranks = analyzeRanks(trace);
  const RankReport& ranks = s.ranks;
  for (const auto& rk : ranks.ranks)
    if (!o.stream.empty() && (o.stream == rk.stream || o.stream == rk.stream + ".dls")) {
      o.rank = rk.rank;  // a rank's stream replays as that rank, alone (not under its launcher)
      o.stream.clear();
    }
  if (ranks.distributed() && !o.rank && !o.allRanks && o.stream.empty()) {
    bool kept = true;
    for (const auto& rk : ranks.ranks) kept = kept && rk.keptResults == rk.results;
    if (kept) {
      int pick = ranks.origin ? ranks.origin->rank : ranks.ranks.front().rank;
      for (const auto& rk : ranks.ranks)
        if (!ranks.origin && rk.failure) {
          pick = rk.rank;
          break;
        }
      o.rank = pick;
      r.notes.push_back("distributed trace (" + std::to_string(ranks.ranks.size()) + " ranks): replaying rank " +
                        std::to_string(pick) + " alone (--rank " + std::to_string(pick) +
                        "; --all-ranks for every rank)");
    } else {
      o.allRanks = true;
      r.notes.push_back("distributed trace (ranks here: " + std::to_string(ranks.ranksHere()) + " of " +
                        std::to_string(ranks.worldSize) +
                        ") recorded without collective results: relaunching every rank (--all-ranks)");
    }
  }
  if ((o.rank || o.allRanks) && !ranks.distributed()) {
    r.refusal = {kExitNotFound,
                 {"the trace holds no rank of a distributed job (no torch.distributed launcher was recorded)"}};
    return false;
  }
  if (o.rank) {
    const RankStatus* sel = nullptr;
    for (const auto& rk : ranks.ranks)
      if (rk.rank == *o.rank && (!sel || rk.restart > sel->restart)) sel = &rk;
    if (!sel) {
      r.refusal = {kExitNotFound,
                   {"the trace holds no rank " + std::to_string(*o.rank) + " (ranks 0 to " +
                    std::to_string(ranks.ranks.back().rank) + "; see dltrace info)"}};
      return false;
    }
    if (sel->keptResults == 0 && sel->results != 0) {
      r.refusal = {kExitNotFound,
                   {"rank " + std::to_string(*o.rank) + " cannot run without its peers: the recording kept " +
                    std::to_string(sel->keptResults) + " of its " + std::to_string(sel->results) +
                    " collective results (record with 'dlrecord --collectives full'); replay every rank with "
                    "--all-ranks instead"}};
      return false;
    }
    // Targets and step counts are this rank's.
    s.summary.steps = sel->steps;
    s.summary.failure = sel->failure;
    s.summary.crash.reset();
    for (const auto& p : s.summary.processes)
      if (p.name == sel->stream) s.summary.crash = p.crash;
    s.rank = *sel;
  }
  if (o.allRanks) {
    if (!o.until.empty() && o.until != "end") {
      r.refusal = {kExitUsage,
                   {"--all-ranks replays every rank to the end (a rank stopped early would leave its peers "
                    "waiting); to stop at a target replay one rank with --rank R --until " +
                    o.until}};
      return false;
    }
    o.until = "end";
    // A job of several machines, one dlrecord (and one trace) each: this machine's ranks meet
    // the others over the network, which the sandbox's own network namespace keeps out. The
    // user says so (--net host) rather than dlreplay opening the network by itself.
    if (ranks.spansMachines() && !o.hostNetwork) {
      r.refusal = {kExitUsage,
                   {"this trace holds " + std::to_string(ranks.ranksHere()) + " of the job's " +
                        std::to_string(ranks.worldSize) + " ranks (" + std::to_string(ranks.localWorldSize) +
                        " a machine): the others ran on other machines, each recorded into its own trace, and "
                        "replaying its ranks means meeting theirs over the network, which a replay keeps out",
                    "run dlreplay on every machine at the same time, each on its own trace, with --net host:",
                    "  dlreplay " + tools::shellQuote(o.trace) + " --all-ranks --net host"}};
      return false;
    }
  }
  s.allRanks = o.allRanks;
  return true;
}

// The target, checked against what the trace holds.
bool chooseTarget(Trace& trace, const ReplayOptions& o, SelectionResult& r, ReplaySelection& s) {
  const TraceSummary& sum = s.summary;
  s.until = o.until;
  if (s.until.empty()) s.until = !sum.failure ? "end" : sum.failure->kind == "nonfinite" ? "nan" : "crash";
  std::string err;
  auto target = parseReplayTarget(s.until, err);
  if (!target) {  // the option parser accepted it: only a hand-built ReplayOptions gets here
    r.refusal = {kExitUsage, {err}};
    return false;
  }
  s.target = *target;
  if (s.target.kind == ReplayTarget::Kind::Nan && !(sum.failure && sum.failure->kind == "nonfinite") &&
      !recordsNonFinite(trace)) {
    r.refusal = {kExitNotFound, {"the trace records no non-finite value; use --until step=N, crash or end"}};
    return false;
  }
  if (s.target.kind == ReplayTarget::Kind::Crash && !sum.crash) {
    r.refusal = {kExitNotFound, {"the trace records no exception or fatal signal; use --until nan, step=N or end"}};
    return false;
  }
  if (s.target.kind == ReplayTarget::Kind::Step && s.target.step >= static_cast<int64_t>(sum.steps)) {
    r.refusal = {kExitNotFound,
                 {"step " + std::to_string(s.target.step) + " is beyond the trace, which holds " +
                  (sum.steps == 0 ? std::string("no completed step")
                                  : "steps 0 to " + std::to_string(static_cast<int64_t>(sum.steps) - 1))}};
    return false;
  }
  return true;
}

// One dlrecord per rank and no torch.distributed.elastic variable in any rank's environment
// (torchrun sets TORCHELASTIC_RUN_ID & co.): the ranks were started by hand (env://), once each.
bool startedByHand(Trace& trace, const ReplaySelection& s) {
  for (const auto& rk : s.ranks.ranks) {
    StreamReader* rs = trace.find(rk.stream);
    if (!rs || rk.restart != 0) return false;
    for (auto kv : rs->header().getDistEnv())
      if (std::string_view(kv.getKey().cStr()).starts_with("TORCHELASTIC_")) return false;
  }
  return !s.ranks.ranks.empty();
}

// The command and its working directory: the recorded one, a rank's own, or the user's.
bool chooseCommand(Trace& trace, const ReplayOptions& o, SelectionResult& r, ReplaySelection& s) {
  auto ti = s.launcher->header().getTrace();
  s.command = o.command;
  s.explicitCommand = !s.command.empty();
  s.cwd = ti.getCwd().cStr();
  if (!s.explicitCommand && s.rank) {
    // The rank's own command line, not the launcher's (torchrun would start every rank).
    auto h = s.stream->header();
    for (auto a : h.getArgv()) s.command.emplace_back(a.cStr());
    if (h.getCwd().size()) s.cwd = h.getCwd().cStr();
  } else if (!s.explicitCommand && s.allRanks && s.launcher->name() != Trace::kLauncherName &&
             startedByHand(trace, s)) {
    // No launcher started them: dlreplay starts each rank as it was started (main.cc).
    if (s.ranks.spansMachines()) {
      r.refusal = {kExitUsage,
                   {"these ranks were started by hand on several machines: dlreplay cannot start the other "
                    "machines' ranks; replay one rank alone with --rank R (needs dlrecord --collectives full)"}};
      return false;
    }
    for (const auto& rk : s.ranks.ranks) {
      StreamReader* rs = trace.find(rk.stream);
      if (!rs) continue;
      ReplaySelection::RankLaunch l;
      l.rank = rk.rank;
      auto h = rs->header();
      for (auto a : h.getArgv()) l.argv.emplace_back(a.cStr());
      l.cwd = h.getCwd().size() ? h.getCwd().cStr() : s.cwd;
      for (auto kv : h.getDistEnv()) l.distEnv.emplace_back(kv.getKey().cStr(), kv.getValue().cStr());
      if (l.argv.empty()) {
        r.refusal = {kExitCorrupt, {"rank " + std::to_string(rk.rank) + "'s stream records no command"}};
        return false;
      }
      s.rankLaunches.push_back(std::move(l));
    }
    s.command = s.rankLaunches.front().argv;
    s.cwd = s.rankLaunches.front().cwd;
  } else if (!s.explicitCommand && s.allRanks && s.launcher->name() != Trace::kLauncherName) {
    // The ranks must run the recorded command lines exactly: --no_python keeps torchrun from
    // adding its own interpreter flags.
    std::vector<std::string> rankArgv;
    if (StreamReader* r0 = trace.findRank(s.ranks.ranks.front().rank))
      for (auto a : r0->header().getArgv()) rankArgv.emplace_back(a.cStr());
    r.refusal = {kExitUsage,
                 {"this trace was recorded with one dlrecord per rank (torchrun ... dlrecord ...): give the launcher "
                  "command after '--', e.g.",
                  "  dlreplay " + tools::shellQuote(o.trace) + " --all-ranks -- torchrun --nnodes=1 --nproc_per_node=" +
                      std::to_string(s.ranks.worldSize) + " --no_python " + tools::joinCommand(rankArgv)}};
    return false;
  } else if (!s.explicitCommand) {
    for (auto a : ti.getCommand()) s.command.emplace_back(a.cStr());
  }
  if (s.command.empty()) {
    r.refusal = {kExitCorrupt, {"the trace records no command; give one after '--'"}};
    return false;
  }
  return true;
}

}  // namespace

SelectionResult selectReplay(Trace& trace, const ReplayOptions& options, bool cudaDevicePresent) {
  SelectionResult r;
  ReplayOptions o = options;
  ReplaySelection s;
  s.summary = trace.summarize();
  // Replay verifies every recorded step, untrained ones (no backward()) included.
  s.summary.steps += s.summary.untrainedSteps;
  s.launcher = trace.launcher();
  if (!chooseRank(trace, o, r, s)) return r;
  s.stream = s.rank ? trace.find(s.rank->stream) : o.stream.empty() ? trace.mainStream() : trace.find(o.stream);
  if (!s.stream)
    return refuse(std::move(r), kExitNotFound,
                  {o.stream.empty() ? "the trace holds no recorded process to replay"
                                    : "no stream named '" + o.stream + "' in the trace (see dltrace info)"});
  if (!s.rank && !s.allRanks)
    for (const auto& p : s.summary.processes)
      if (p.name == s.stream->name()) {  // targets and step counts are the replayed stream's, not the main one's
        s.summary.steps = p.steps + p.untrainedSteps;
        s.summary.failure = p.failure;
        s.summary.crash = p.crash;
      }
  if (!s.launcher)
    return refuse(std::move(r), kExitCorrupt, {"the trace has no launcher stream (recorded command unknown)"});

  try {
    s.facts = triage::gatherFacts(trace);
  } catch (const std::exception&) {  // best effort: triage facts only sharpen the verdict
  }
  if (o.check && !s.summary.failure) {
    if (!s.facts.exitCode || *s.facts.exitCode == 0)
      return refuse(
          std::move(r), kExitNotFound,
          {std::string("--check: the recording holds no failure (") +
           (s.facts.exitCode ? "the job exited 0" : "the job's end was not recorded") + "): nothing to reproduce"});
    triage::TriageResult early = triage::classify(s.facts);
    if (early.category == triage::Category::ExternalSignal)  // nothing in the job raised it
      return refuse(std::move(r), kExitNotReproduced,
                    {"not reproduced: " + early.summary + "; replay does not re-send signals from outside",
                     std::string("triage: ") + triage::categoryInfo(early.category).name + " [" +
                         triage::dimensionName(early.dimension) + "], a non-deterministic kind of failure (" +
                         triage::categoryInfo(early.category).why + ")"});
    s.checkExit = true;
    o.until = "end";
  }
  if (!chooseTarget(trace, o, r, s)) return r;

  // A GPU job (rank) replays on a GPU machine only: say so before anything runs.
  if (!cudaDevicePresent) {
    std::string gpu = s.allRanks ? std::string() : gpuUsed(*s.stream);
    if (s.allRanks)
      for (const auto& rk : s.ranks.ranks)
        if (StreamReader* rs = trace.find(rk.stream); rs && gpu.empty()) gpu = gpuUsed(*rs);
    if (!gpu.empty())
      return refuse(std::move(r), kExitNotFound,
                    {(s.allRanks ? std::string("the job") : "stream " + s.stream->name()) + " ran on a GPU (" + gpu +
                     "): it replays on a machine with a CUDA device only, and this one has none (no NVIDIA driver "
                     "found)"});
  }

  // Jump replay (ReplayPlan.h): the snapshot restored, from the replayed stream's Snapshot events.
  if (s.allRanks) {
    if (!o.from.empty() && o.from != "start")
      return refuse(std::move(r), kExitUsage, {"--all-ranks replays from step 0; --from is for one process"});
  } else {
    const auto& sum = s.summary;
    int64_t targetStep = s.target.kind == ReplayTarget::Kind::Step                   ? s.target.step
                         : (s.target.kind == ReplayTarget::Kind::Crash && sum.crash) ? sum.crash->step
                         : (s.target.kind != ReplayTarget::Kind::End && sum.failure) ? sum.failure->step
                                                                                     : -1;
    std::string err;
    auto plan = planJump(snapshotsOf(*s.stream), s.target.kind, targetStep, o.from, o.check, err);
    if (!plan) return refuse(std::move(r), kExitNotFound, {err});
    s.jump = *plan;
    if (s.rank && !rankCanRunAlone(*s.rank, s.jump.jumpStep, targetStep, err))
      return refuse(std::move(r), kExitNotFound, {err});
    if (o.withoutData && !servableWithoutData(*s.stream, s.jump.jumpStep, targetStep, err))
      return refuse(std::move(r), kExitNotFound, {err});
  }
  if (!chooseCommand(trace, o, r, s)) return r;
  s.concurrencyCaveat = analyzeConcurrency(trace).caveat();
  r.selection = std::move(s);
  return r;
}

}  // namespace dlrr
