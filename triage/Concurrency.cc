#include "triage/Concurrency.h"

#include <charconv>
#include <cstdlib>
#include <set>

namespace dlrr {
namespace {

std::string listed(const std::vector<std::string>& names, size_t shown) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < shown; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > shown) out += ", ...";
  return out;
}

}  // namespace

Concurrency analyzeConcurrency(Trace& trace) {
  Concurrency c;
  std::set<int> recordedPids;
  struct Fork {
    int pid;
    std::string parent;
  };
  std::vector<Fork> native;
  for (auto& s : trace.streams()) {
    auto h = s->header();
    if (h.getRole() != schema::StreamHeader::Role::PROCESS) continue;
    recordedPids.insert(h.getPid());
    bool trained = false;
    int sharedParams = -1;  // not said
    try {
      s->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
        if (e.isStepBegin()) trained = true;
        if (e.isRuntimeInfo())
          for (auto kv : e.getRuntimeInfo().getItems())
            if (kv.getKey() == "torch.shared_parameters") {
              auto v = kv.getValue();
              std::from_chars(v.begin(), v.end(), sharedParams);  // not a number: stays "not said"
            }
        if (e.isFork() && e.getFork().getKind() == schema::Fork::Kind::NATIVE)
          native.push_back({e.getFork().getChildPid(), s->name()});
      });
    } catch (const TraceError&) {  // best effort: damage: what precedes it counts
    }
    if (!trained || h.getRank() >= 0) continue;  // ranks of torch.distributed share no memory
    c.trainers.push_back(s->name());
    if (sharedParams > 0) c.sharing.push_back(s->name());
    if (sharedParams < 0) c.unknownSharing.push_back(s->name());
  }
  for (const auto& f : native)
    if (!recordedPids.count(f.pid))  // one that exec'd records itself under the same pid
      c.unrecorded.push_back({f.pid, f.parent, "forked by native code, not through Python's os.fork"});
  return c;
}

std::string Concurrency::caveat() const {
  std::string why;
  // Trainers that kept their parameters to themselves (each its own model) do not race.
  if (trainers.size() > 1 && !sharing.empty())
    why = std::to_string(trainers.size()) + " processes trained at once without torch.distributed (" +
          listed(trainers, 4) + "), " + std::to_string(sharing.size()) + " of them updating parameters in shared " +
          "memory (Hogwild, model.share_memory()): their updates race, so a replay of one of them can verify " +
          "bit-exact while the recording raced";
  else if (trainers.size() > 1 && !unknownSharing.empty())
    why = std::to_string(trainers.size()) + " processes trained at once without torch.distributed (" +
          listed(trainers, 4) +
          "): if they share a model (Hogwild, model.share_memory()) their updates race, so a replay of one of "
          "them can verify bit-exact while the recording raced";
  if (!unrecorded.empty()) {
    std::vector<std::string> which;
    for (const auto& u : unrecorded)
      which.push_back("pid " + std::to_string(u.pid) + " " + u.how + " in " + u.parentStream);
    if (!why.empty()) why += "; and ";
    why += std::to_string(unrecorded.size()) + (unrecorded.size() == 1 ? " process" : " processes") +
           " of the job ran unrecorded (" + listed(which, 3) + "): what " + (unrecorded.size() == 1 ? "it" : "they") +
           " did is not in the trace";
  }
  return why.empty() ? "" : "determinism cannot be claimed: " + why;
}

}  // namespace dlrr
