#include "replayer/ReplayTarget.h"

#include <cerrno>
#include <cstdlib>

namespace dlrr {

std::string ReplayTarget::describe() const {
  switch (kind) {
    case Kind::End: return "end";
    case Kind::Step: return "step=" + std::to_string(step);
    case Kind::Nan: return "nan";
    case Kind::Crash: return "crash";
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
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(n.c_str(), &end, 10);
    if (n.empty() || *end || errno == ERANGE) {
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
