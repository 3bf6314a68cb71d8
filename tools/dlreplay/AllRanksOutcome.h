#pragma once
// `dlreplay --all-ranks`: what every rank's replay came to, one line per rank, then one verdict.
#include <string>
#include <utility>
#include <vector>

#include "format/Ranks.h"

namespace dlrr {

// (rank, path of its report file)
using RankReports = std::vector<std::pair<int, std::string>>;

// Reads (and removes) each rank's report, prints a line per rank and the verdict (text on
// stderr, or one JSON line on stdout), and returns the exit code: 0 when every rank replayed
// its stream to the end with every step verified; 11 when one diverged; 12 when none attached;
// else 10. `launcherStatus`: the launcher's wait status (torchrun's), said when it failed.
// `who`: what that status is of ("the launcher", or "rank 1" when dlreplay started the ranks).
int allRanksOutcome(const RankReport& ranks, const RankReports& files, int launcherStatus, bool json,
                    const std::string& who = "the launcher");

}  // namespace dlrr
