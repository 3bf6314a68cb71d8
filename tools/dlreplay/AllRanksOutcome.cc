#include "tools/dlreplay/AllRanksOutcome.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "replayer/ReplayReport.h"
#include "tools/common/Json.h"
#include "tools/dlreplay/ReplayOutcome.h"

namespace dlrr {

int allRanksOutcome(const RankReport& ranks, const RankReports& files, const ProcessEnd& end, bool json) {
  const int status = end.waitStatus;
  int diverged = 0, attached = 0, complete = 0;
  std::string out;
  tools::JsonWriter j(out, 0);
  j.beginObject();
  j.key("ranks").beginArray();
  for (const auto& [rank, path] : files) {
    auto rep = readReplayReportFile(path);
    ::unlink(path.c_str());
    uint64_t recorded = 0;
    for (const auto& r : ranks.ranks)
      if (r.rank == rank) recorded = r.steps;
    const std::string verified = std::to_string(rep.verifiedSteps);
    std::string line;
    std::string state;
    if (!rep.attached) {
      state = "not-attached";
      line = "never attached to its stream";
    } else if (rep.divergence) {
      ++attached;
      ++diverged;
      state = "divergence";
      line = "diverged at step " + std::to_string(rep.divergence->step) + ": " + rep.divergence->detail;
    } else {
      ++attached;
      bool all = static_cast<uint64_t>(rep.verifiedSteps) == recorded;
      complete += all;
      state = all ? "verified" : "incomplete";
      line = verified + " of " + std::to_string(recorded) + " recorded steps verified bit-exact";
    }
    if (rep.dist) line += "; collectives: " + collectivesText(*rep.dist);
    if (!json) std::fprintf(stderr, "dlreplay: rank %d: %s\n", rank, line.c_str());
    j.beginObject();
    j.field("rank", rank);
    j.field("outcome", state);
    j.field("message", line);
    j.field("verified_steps", static_cast<long long>(rep.verifiedSteps));
    j.field("recorded_steps", static_cast<long long>(recorded));
    j.endObject();
  }
  j.endArray();
  int code = diverged                                     ? kExitDivergence
             : attached == 0                              ? kExitNoReplay
             : complete == static_cast<int>(files.size()) ? kExitOk
                                                          : kExitNotReached;
  const int shellCode = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
  const bool otherEnd = end.recordedExit && shellCode != *end.recordedExit;
  // One machine's share of a job of several: the verdict is about the ranks replayed here.
  const std::string every = ranks.spansMachines() ? "every rank of this machine (" + std::to_string(ranks.ranksHere()) +
                                                        " of world size " + std::to_string(ranks.worldSize) + ")"
                                                  : std::string("every rank");
  std::string verdict = code == kExitOk && otherEnd ? every + " verified every step, but the job ended otherwise"
                        : code == kExitOk           ? every + " replayed to the end, every step verified"
                        : code == kExitDivergence   ? std::to_string(diverged) + " rank(s) diverged from the recording"
                        : code == kExitNoReplay ? "no rank attached to the trace (is it the recorded launcher command?)"
                                                : "not every rank replayed all its recorded steps";
  if (code == kExitOk && otherEnd) code = kExitDivergence;  // an end the recording did not have is no verified replay
  if (shellCode != 0 || otherEnd)
    verdict += " (" + end.who + " " +
               (WIFSIGNALED(status) ? std::string("was killed by ") + strsignal(WTERMSIG(status))
                                    : "exited with " + std::to_string(shellCode)) +
               (otherEnd ? "; recorded: exit status " + std::to_string(*end.recordedExit) : std::string()) + ")";
  j.field("exit_code", code);
  j.field("ranks_here", ranks.ranksHere());
  j.field("world_size", ranks.worldSize);
  j.field("message", verdict);
  j.endObject();
  if (json)
    std::printf("%s\n", out.c_str());
  else
    std::fprintf(stderr, "dlreplay: %s\n", verdict.c_str());
  return code;
}

}  // namespace dlrr
