#pragma once
// Where a replay stops: `nan` (right before the first non-finite value), `step=N` (at the
// start of step N, batch in hand), `crash` (the recorded exception or fatal signal), `end`.
#include <cstdint>
#include <optional>
#include <string>

namespace dlrr {

struct ReplayTarget {
  enum class Kind { End = 0, Step = 1, Nan = 2, Crash = 3 } kind = Kind::End;
  int64_t step = -1;  // step=N, or the step of the recorded failure
  // For nan: what produced the first non-finite value (schema TensorDigest.Kind numbering).
  int digestKind = -1;
  std::string where;  // module path, "loss", "grad:NAME", "param:NAME"
  uint32_t callIndex = 0;

  std::string describe() const;
};

// Parses the user's --until text; nullopt with `error` set when malformed.
std::optional<ReplayTarget> parseReplayTarget(const std::string& text, std::string& error);

}  // namespace dlrr
