#include "tools/dlreplay/ReplayPlan.h"

#include <cerrno>
#include <cstdlib>

namespace dlrr {
namespace {

std::optional<int64_t> stepOf(const std::string& from) {
  if (from.rfind("step=", 0) != 0 || from.size() == 5) return std::nullopt;
  const char* s = from.c_str() + 5;
  if (*s < '0' || *s > '9') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s, &end, 10);
  if (errno != 0 || *end != '\0') return std::nullopt;
  return v;
}

std::string describe(const SnapshotInfo& s) {
  return "snapshot of step " + std::to_string(s.step) + (s.failure ? " (the failure snapshot)" : "");
}

// Said whichever way the snapshot was chosen (--from step=N included): what is not verified.
std::string fastForwarded(int64_t step) {
  if (step <= 0) return "";
  return step == 1 ? ": step 0 is fast-forwarded (not verified)"
                   : ": steps 0-" + std::to_string(step - 1) + " are fast-forwarded (not verified)";
}

}  // namespace

bool validJumpFrom(const std::string& from) {
  return from.empty() || from == "snapshot" || from == "start" || stepOf(from).has_value();
}

std::optional<JumpPlan> planJump(const std::vector<SnapshotInfo>& snapshots, ReplayTarget::Kind target,
                                 int64_t targetStep, const std::string& from, bool useFailure, std::string& error) {
  JumpPlan plan;
  if (!validJumpFrom(from)) {
    error = "--from takes snapshot, start or step=N, not '" + from + "'";
    return std::nullopt;
  }
  if (from == "start") {
    plan.why = "replaying from step 0 (--from start)";
    return plan;
  }
  if (auto want = stepOf(from)) {
    for (const auto& s : snapshots)
      if (s.step == *want) {
        if (targetStep >= 0 && s.step > targetStep) {
          error = "the " + describe(s) + " lies after the target (step " + std::to_string(targetStep) + ")";
          return std::nullopt;
        }
        plan.jumpStep = s.step;
        plan.why = "jumping to the " + describe(s) + fastForwarded(s.step);
        return plan;
      }
    error = "the trace holds no snapshot of step " + std::to_string(*want);
    if (!snapshots.empty()) {
      error += " (snapshots:";
      size_t shown = 0;
      for (const auto& s : snapshots)
        if (shown++ < 8) error += " " + std::to_string(s.step);
      error += shown > 8 ? " ...)" : ")";
    }
    return std::nullopt;
  }
  // "" or "snapshot": the latest usable snapshot. With no step to reach (--until end) only an
  // explicit --from snapshot jumps: the default replays and verifies everything.
  const bool untilEnd = target == ReplayTarget::Kind::End || targetStep < 0;
  if (untilEnd && from.empty()) {
    plan.why = "replaying from step 0 (no target step to jump towards)";
    return plan;
  }
  const SnapshotInfo* best = nullptr;
  for (const auto& s : snapshots) {
    if (s.step <= 0 || (!untilEnd && s.step > targetStep)) continue;
    if (s.failure && from.empty() && !useFailure) continue;
    if (!best || s.step > best->step || (s.step == best->step && best->failure && !s.failure)) best = &s;
  }
  if (!best) {
    if (from == "snapshot") {
      error = snapshots.empty() ? "the trace holds no snapshot (record with dlrecord --snapshot-every)"
                                : "the trace holds no snapshot at or before step " + std::to_string(targetStep);
      return std::nullopt;
    }
    plan.why = "replaying from step 0 (no snapshot at or before the target)";
    return plan;
  }
  plan.jumpStep = best->step;
  plan.why = "jumping to the " + describe(*best) + fastForwarded(best->step);
  return plan;
}

}  // namespace dlrr
