#include "replayer/ReplayTarget.h"

#include <charconv>

namespace dlrr {

std::string ReplayTarget::describe() const {
  switch (kind) {
    case Kind::End:
      return "end";
    case Kind::Step:
      return "step=" + std::to_string(step);
    case Kind::Nan:
      return "nan";
    case Kind::Crash:
      return "crash";
  }
  return "?";
}

std::optional<ReplayTarget> parseReplayTarget(const std::string& text, std::string& error) {
  ReplayTarget t;
  if (text == "nan") {
    t.kind = ReplayTarget::Kind::Nan;
  } else if (text == "crash") {
    t.kind = ReplayTarget::Kind::Crash;
  } else if (text == "end") {
    t.kind = ReplayTarget::Kind::End;
  } else if (text.rfind("step=", 0) == 0) {
    std::string n = text.substr(5);
    // from_chars: digits and an optional '-' only (no blanks, no '+', nothing after them).
    long long v = 0;
    auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), v);
    if (n.empty() || ec != std::errc() || end != n.data() + n.size()) {
      error = "--until step=N needs a whole number (got '" + n + "')";
      return std::nullopt;
    }
    if (v < 0) {
      error = "--until step=N needs N >= 0 (got " + n + "); steps are numbered from 0";
      return std::nullopt;
    }
    t.kind = ReplayTarget::Kind::Step;
    t.step = v;
  } else {
    error = "unknown --until target '" + text + "' (use nan, step=N, crash or end)";
    return std::nullopt;
  }
  return t;
}

}  // namespace dlrr
