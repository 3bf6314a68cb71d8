#pragma once
// `dlreplay --all-ranks`: what every rank's replay came to, one line per rank, then one verdict.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "triage/Ranks.h"

namespace dlrr {

// (rank, path of its report file)
using RankReports = std::vector<std::pair<int, std::string>>;

// Reads (and removes) each rank's report, prints a line per rank and the verdict (text on
// stderr, or one JSON line on stdout), and returns the exit code: 0 when every rank replayed
// its stream to the end with every step verified; 11 when one diverged; 12 when none attached;
// else 10. `end`: how the launcher (torchrun) ended, or the first rank that ended otherwise
// than recorded when dlreplay started the ranks; said when it failed. Every step verified but
// an end the recording did not have (another status, a signal) is a divergence (11).
struct ProcessEnd {
  std::string who = "the launcher";  // or "rank 1"
  int waitStatus = 0;
  std::optional<int> recordedExit;  // its recorded exit status (128+N: signal N), when known
};
int allRanksOutcome(const RankReport& ranks, const RankReports& files, const ProcessEnd& end, bool json);

}  // namespace dlrr
