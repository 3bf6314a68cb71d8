#include "triage/Ranks.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <set>

namespace dlrr {
namespace {

bool anyNonFinite(capnp::List<schema::CollectiveTensor>::Reader ts) {
  for (auto t : ts)
    if (t.getNanCount() || t.getInfCount()) return true;
  return false;
}

int parseLocalWorldSize(const char* text) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text, &end, 10);
  return (errno == 0 && end != text && *end == '\0' && v > 0 && v <= (1 << 24)) ? static_cast<int>(v) : 0;
}

}  // namespace

std::string collectiveDisplayName(const std::string& op) {
  if (op == "ddp_bucket" || op == "ddp_allreduce") return "DDP all-reduce";
  if (op == "ddp_init_sync") return "DDP start-up broadcast";
  return op;
}

int RankReport::ranksHere() const {
  std::set<int> distinct;
  for (const auto& r : ranks) distinct.insert(r.rank);
  return static_cast<int>(distinct.size());
}

RankReport analyzeRanks(Trace& t) {
  RankReport rep;
  for (auto& s : t.streams()) {
    auto h = s->header();
    if (h.getRole() != schema::StreamHeader::Role::PROCESS || h.getRank() < 0) continue;
    RankStatus r;
    r.rank = h.getRank();
    r.localRank = h.getLocalRank();
    r.restart = h.getRestartCount();
    r.stream = s->name();
    r.host = h.getHost().cStr();
    r.pid = h.getPid();
    r.cleanClose = s->status().cleanClose;
    r.position.rank = r.rank;
    std::set<uint64_t> completed;
    std::vector<std::pair<int64_t, Hash128>> refs;  // results kept by reference: (step, blob)
    std::vector<int64_t> unkept;                    // steps of results whose bytes are not in the trace
    rep.worldSize = std::max(rep.worldSize, static_cast<int>(h.getWorldSize()));
    for (auto kv : h.getDistEnv())
      if (kv.getKey() == "LOCAL_WORLD_SIZE")
        rep.localWorldSize = std::max(rep.localWorldSize, parseLocalWorldSize(kv.getValue().cStr()));
    try {
      s->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
        switch (e.which()) {
          case schema::Event::STEP_END:
            ++r.steps;
            break;
          case schema::Event::COLLECTIVE_WAIT: {
            auto w = e.getCollectiveWait();
            auto& p = r.position;
            using R = schema::CollectiveWait::Reason;
            p.waitReason = w.getReason() == R::HANG ? "hang" : w.getReason() == R::STALLED ? "stalled" : "terminated";
            p.terminated = p.terminated || w.getReason() == R::TERMINATED;
            p.waitedSeconds = static_cast<double>(w.getWaitedMs()) / 1000.0;
            p.stacks = w.getStacks().cStr();
            p.stackLine = innermostUserFrame(p.stacks);
            if (w.getWaiting() && !completed.count(w.getSeq())) {
              p.ops[w.getSeq()] = w.getOp().cStr();
              p.stepOf[w.getSeq()] = w.getIssuedStep();
              p.inFlight = w.getSeq();
            }
            break;
          }
          case schema::Event::PROCESS_EXIT:
            r.exitCode = e.getProcessExit().getExitCode();
            break;
          case schema::Event::COLLECTIVE: {
            auto c = e.getCollective();
            ++r.collectives;
            auto& p = r.position;
            p.ops[c.getSeq()] = c.getOp().cStr();
            p.stepOf[c.getSeq()] = e.getStep();
            if (c.getGroup() != "world") p.subgroups = true;
            if (c.getStatus().size() == 0) {
              completed.insert(c.getSeq());
              p.lastCompleted = std::max(p.lastCompleted, static_cast<int64_t>(c.getSeq()));
              if (p.inFlight == c.getSeq()) p.inFlight.reset();
            } else {
              p.inFlight = c.getSeq();  // failed: issued, never completed
            }
            for (auto res : c.getResults()) {
              ++r.results;
              if (res.hasData() && res.getData().getSize())
                refs.push_back({e.getStep(), Hash128{res.getData().getHashLo(), res.getData().getHashHi()}});
              else
                unkept.push_back(e.getStep());
            }
            if (r.receivedOp.empty() && !anyNonFinite(c.getInputs()) && anyNonFinite(c.getResults())) {
              r.receivedOp = c.getOp().cStr();
              r.receivedSeq = c.getSeq();
              r.receivedStep = e.getStep();
              r.receivedBlind = c.getInputs().size() == 0;
            }
            break;
          }
          case schema::Event::FAILURE: {
            if (r.failure) break;
            FailureInfo fi = failureInfo(e.getFailure(), r.stream);
            r.failure = fi;
            // Events are in the order the rank saw them: a non-finite result received before
            // its own first non-finite value is where that value came from.
            r.failureReceived = fi.kind == "nonfinite" && !r.receivedOp.empty();
            break;
          }
          default:
            break;
        }
      });
    } catch (const TraceError&) {  // best effort: damaged: what precedes the damage counts
    }
    // A reference is kept only when its blob is in the stream: a --window recording refers to
    // results the window held, and writes only those of the window the job failed in.
    for (const auto& [step, blob] : refs) {
      bool present = false;
      try {
        present = s->hasBlob(blob);
      } catch (const TraceError&) {  // best effort: an unreadable stream: the blob counts as absent
      }
      if (present)
        ++r.keptResults;
      else
        unkept.push_back(step);
    }
    std::sort(unkept.begin(), unkept.end());
    for (int64_t step : unkept)
      if (!r.unkeptSteps.empty() && step <= r.unkeptSteps.back().second + 1)
        r.unkeptSteps.back().second = std::max(r.unkeptSteps.back().second, step);
      else
        r.unkeptSteps.push_back({step, step});
    r.position.steps = static_cast<int64_t>(r.steps);
    r.position.exitCode = r.exitCode;
    rep.ranks.push_back(std::move(r));
  }
  // A rank whose library could not know its exit code (-1: it left by returning from main, as a
  // Python rank script that simply ends does) gets the status its launcher saw (a rank started
  // by hand under its own dlrecord), as Trace::summary says it, never "exit status -1".
  if (std::any_of(rep.ranks.begin(), rep.ranks.end(), [](const RankStatus& r) { return r.exitCode == -1; })) {
    std::map<int64_t, int> launcherSaw;
    for (auto& s : t.streams()) {
      if (s->header().getRole() != schema::StreamHeader::Role::LAUNCHER) continue;
      try {
        s->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
          if (e.isProcessExit()) launcherSaw[e.getProcessExit().getPid()] = e.getProcessExit().getExitCode();
        });
      } catch (const TraceError&) {  // best effort: a damaged launcher stream: its children keep their own codes
      }
    }
    for (auto& r : rep.ranks) {
      if (r.exitCode != -1) continue;
      // Not seen by a launcher of ours (torchrun's agent started it): it did exit, with a code
      // no one recorded; -1 says that (Wavefront: "ended"), never "died without an exit".
      auto it = launcherSaw.find(r.pid);
      if (it != launcherSaw.end()) r.exitCode = it->second;
      r.position.exitCode = r.exitCode;
    }
  }
  std::sort(rep.ranks.begin(), rep.ranks.end(), [](const RankStatus& a, const RankStatus& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.restart < b.restart;
  });
  // A collective that records only results (DDP's built-in all-reduce: gradients after it)
  // cannot tell a rank's own non-finite gradients from received ones. When no rank made the
  // value in front of it, they are its own: nothing says it came from elsewhere.
  bool anyOwn = false;
  for (const auto& r : rep.ranks)
    anyOwn = anyOwn || (r.failure && r.failure->kind == "nonfinite" && !r.failureReceived);
  if (!anyOwn)
    for (auto& r : rep.ranks)
      if (r.receivedBlind) r.failureReceived = false;
  // The origin: a rank whose first non-finite value was its own (not received), earliest step
  // first; every rank that received one is "reached".
  const RankStatus* origin = nullptr;
  for (const auto& r : rep.ranks) {
    if (!r.failure || r.failure->kind != "nonfinite" || r.failureReceived) continue;
    if (!origin || r.failure->step < origin->failure->step) origin = &r;
  }
  // Hangs: each rank's last incarnation (an elastic restart starts its collectives afresh).
  std::map<int, const RankPosition*> last;
  for (const auto& r : rep.ranks) last[r.rank] = &r.position;
  std::vector<RankPosition> positions;
  positions.reserve(last.size());
  for (const auto& [rank, p] : last) positions.push_back(*p);
  rep.hang = findHang(positions);
  if (origin) {
    NonFiniteOrigin o;
    o.rank = origin->rank;
    o.failure = *origin->failure;
    for (const auto& r : rep.ranks) {
      if (&r == origin || !r.failureReceived) continue;
      if (std::find(o.reached.begin(), o.reached.end(), r.rank) == o.reached.end()) o.reached.push_back(r.rank);
      if (o.via.empty() || r.receivedStep < o.viaStep) {
        o.via = collectiveDisplayName(r.receivedOp);
        o.viaStep = r.receivedStep;
      }
    }
    rep.origin = o;
  }
  return rep;
}

std::string formatOrigin(const NonFiniteOrigin& o) {
  std::string out = "rank " + std::to_string(o.rank) + ", step " + std::to_string(o.failure.step) + ", " +
                    o.failure.where + (o.failure.message.empty() ? "" : " (" + o.failure.message + ")");
  if (!o.reached.empty()) {
    out += "; reached rank" + std::string(o.reached.size() > 1 ? "s " : " ");
    for (size_t i = 0; i < o.reached.size(); ++i) out += (i ? "," : "") + std::to_string(o.reached[i]);
    out += " through " + o.via + (o.viaStep >= 0 ? " at step " + std::to_string(o.viaStep) : "");
  }
  return out;
}

}  // namespace dlrr
