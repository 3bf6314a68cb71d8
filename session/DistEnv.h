#pragma once
// What a distributed launcher (torchrun / torch.distributed.elastic) tells a rank through its
// environment. Read by the recorder (stream header), by dlrecord (one launcher stream per
// rank when torchrun runs `dlrecord` per rank) and by replay (which stream a rank replays).
#include <string>
#include <utility>
#include <vector>

namespace dlrr {

struct DistEnv {
  int rank = -1;  // RANK; -1 when absent or malformed
  int localRank = -1;
  int worldSize = 0;
  int restartCount = 0;  // TORCHELASTIC_RESTART_COUNT
  std::string runId;     // TORCHELASTIC_RUN_ID
  // The launcher-set variables a rank needs to run again on its own, in name order.
  std::vector<std::pair<std::string, std::string>> vars;

  bool isRank() const { return rank >= 0 && worldSize > 0; }

  // `get` returns a variable's value or null (std::getenv by default).
  static DistEnv fromEnvironment(const char* (*get)(const char*) = nullptr);
};

// Names whose values describe the process's place in a distributed job (recorded per rank).
bool isDistVariable(const std::string& name);

// Stream base name of a rank's process ("rank3", "rank3.restart1"); "" when not a rank.
std::string rankStreamBase(const DistEnv& d);

}  // namespace dlrr
