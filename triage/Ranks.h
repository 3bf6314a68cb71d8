#pragma once
// The ranks of a distributed trace (docs/distributed.md): one process stream per rank, its
// status, and where the first non-finite value came from before communication spread it.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "format/Trace.h"
#include "format/Wavefront.h"

namespace dlrr {

struct RankStatus {
  int rank = -1;
  int localRank = -1;
  int restart = 0;
  std::string stream;
  std::string host;
  int pid = 0;
  uint64_t steps = 0;
  uint64_t collectives = 0;
  uint64_t keptResults = 0;  // collective results whose bytes the trace holds
  uint64_t results = 0;      // collective results recorded (digest or bytes)
  // The steps (ascending ranges, first and last included; -1: before the first step) with a
  // collective result whose bytes the trace does not hold: a rank replays alone only where none.
  std::vector<std::pair<int64_t, int64_t>> unkeptSteps;
  std::optional<int> exitCode;
  bool cleanClose = false;
  std::optional<FailureInfo> failure;  // the rank's first failure
  // The first collective that brought non-finite values to this rank while what it sent was
  // finite (op, seq, step); empty op when none.
  std::string receivedOp;
  uint64_t receivedSeq = 0;
  int64_t receivedStep = -1;
  bool receivedBlind = false;    // that collective records no inputs (DDP's built-in all-reduce)
  bool failureReceived = false;  // its first non-finite value arrived through that collective
  RankPosition position;         // its collectives and last wait (hangs, desyncs)
};

struct NonFiniteOrigin {
  int rank = -1;
  FailureInfo failure;
  std::vector<int> reached;  // ranks whose first non-finite value came through communication
  std::string via;           // the collective that carried it first ("DDP all-reduce", ...)
  int64_t viaStep = -1;
};

struct RankReport {
  std::vector<RankStatus> ranks;  // by rank, then restart
  int worldSize = 0;
  // LOCAL_WORLD_SIZE as the launcher set it (0: unknown, e.g. ranks started by hand): fewer
  // than worldSize means the job ran on several machines, each recorded by its own dlrecord
  // into its own trace, which then holds that machine's ranks only.
  int localWorldSize = 0;
  int ranksHere() const;  // distinct ranks in this trace
  bool spansMachines() const { return localWorldSize > 0 && worldSize > localWorldSize; }
  std::optional<NonFiniteOrigin> origin;
  std::optional<HangFinding> hang;  // where the ranks stopped meeting (one restart: the last)
  bool distributed() const { return !ranks.empty(); }
};

// Reads every rank stream of `t` (damaged streams count what precedes the damage).
RankReport analyzeRanks(Trace& t);
// "rank 1, step 3, output of fc2 (...); reached ranks 0,2 through DDP all-reduce at step 3"
std::string formatOrigin(const NonFiniteOrigin& o);
// Human name of a collective op ("ddp_bucket" -> "DDP all-reduce").
std::string collectiveDisplayName(const std::string& op);

}  // namespace dlrr
