#include "format/Wavefront.h"

#include <algorithm>
#include <set>

namespace dlrr {
namespace {

std::string ranksText(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? "," : "") + std::to_string(ranks[i]);
  return out;
}

std::string opAt(const RankPosition& r, uint64_t seq) {
  auto it = r.ops.find(seq);
  return it == r.ops.end() ? "" : it->second;
}

int64_t stepAt(const RankPosition& r, uint64_t seq) {
  auto it = r.stepOf.find(seq);
  return it == r.stepOf.end() ? -1 : it->second;
}

int64_t lastIssued(const RankPosition& r) { return r.ops.empty() ? -1 : static_cast<int64_t>(r.ops.rbegin()->first); }

std::string collectiveText(uint64_t seq, const std::string& op, int64_t step) {
  return "collective #" + std::to_string(seq) + " (" + op + (step >= 0 ? ", step " + std::to_string(step) : "") + ")";
}

std::string waitLine(const RankPosition& r) {
  std::string out = "rank " + std::to_string(r.rank) + ": ";
  if (r.inFlight)
    out += "issued " + collectiveText(*r.inFlight, opAt(r, *r.inFlight), stepAt(r, *r.inFlight)) + ", not completed";
  else
    out += "nothing in flight";
  if (r.lastCompleted >= 0)
    out += "; last completed " + collectiveText(static_cast<uint64_t>(r.lastCompleted),
                                                opAt(r, static_cast<uint64_t>(r.lastCompleted)),
                                                stepAt(r, static_cast<uint64_t>(r.lastCompleted)));
  else
    out += "; none completed";
  if (r.exitCode)
    out += *r.exitCode >= 0 ? "; exited " + std::to_string(*r.exitCode) : std::string("; exited");
  else if (r.terminated)
    out += "; stopped by SIGTERM";
  else
    out += "; no exit recorded";
  return out;
}

}  // namespace

std::string innermostUserFrame(const std::string& stacks) {
  // Traceback text: "Thread NAME:" then '  File "F", line N, in FN' and '    code' lines.
  std::string best;
  size_t pos = 0;
  bool firstThread = true;
  while (pos < stacks.size()) {
    size_t end = stacks.find('\n', pos);
    if (end == std::string::npos) end = stacks.size();
    std::string line = stacks.substr(pos, end - pos);
    pos = end + 1;
    if (line.rfind("Thread ", 0) == 0) {
      if (!best.empty() || !firstThread) break;
      firstThread = false;
      continue;
    }
    if (line.rfind("  File \"", 0) != 0) continue;
    size_t q = line.find('"', 8);
    if (q == std::string::npos) continue;
    std::string file = line.substr(8, q - 8);
    if (file.find("/lib/python") != std::string::npos || file.find("-packages/") != std::string::npos ||
        file.rfind('<', 0) == 0)
      continue;
    std::string rest = line.substr(q + 1);  // ', line N, in FN'
    size_t l = rest.find("line ");
    size_t in = rest.find(", in ");
    if (l == std::string::npos || in == std::string::npos) continue;
    size_t slash = file.rfind('/');
    best = (slash == std::string::npos ? file : file.substr(slash + 1)) + ":" + rest.substr(l + 5, in - l - 5) +
           " in " + rest.substr(in + 5);
    if (pos >= stacks.size()) break;  // no code line after the last frame
    size_t codeEnd = stacks.find('\n', pos);
    std::string next = stacks.substr(pos, codeEnd == std::string::npos ? std::string::npos : codeEnd - pos);
    if (next.rfind("    ", 0) == 0) best += ": " + next.substr(4);
  }
  return best;
}

std::optional<HangFinding> findHang(const std::vector<RankPosition>& ranks) {
  if (ranks.size() < 2) return std::nullopt;
  for (const auto& r : ranks)
    if (r.subgroups) return std::nullopt;
  HangFinding h;
  for (const auto& r : ranks) h.wavefront.push_back(waitLine(r));
  // A desync: the first collective number where the ranks that reached it issued different ops.
  std::set<uint64_t> seqs;
  for (const auto& r : ranks)
    for (const auto& [seq, op] : r.ops) seqs.insert(seq);
  std::map<std::string, int> before;  // op -> how often any rank issued it before
  for (uint64_t seq : seqs) {
    std::map<std::string, std::vector<int>> by;
    for (const auto& r : ranks) {
      std::string op = opAt(r, seq);
      if (!op.empty()) by[op].push_back(r.rank);
    }
    if (by.size() > 1) {
      // The majority wins; a tie goes to the op every rank had been issuing (the others' habit).
      auto better = [&](const auto& a, const auto& b) {
        if (a.second.size() != b.second.size()) return a.second.size() > b.second.size();
        return before[a.first] > before[b.first];
      };
      auto major = by.begin();
      for (auto it = by.begin(); it != by.end(); ++it)
        if (better(*it, *major)) major = it;
      h.desync = true;
      h.seq = seq;
      h.op = major->first;
      h.waiting = major->second;
      for (const auto& r : ranks) {
        std::string op = opAt(r, seq);
        if (op.empty() || op == h.op) continue;
        h.suspects.push_back(r.rank);
        if (h.step < 0) h.step = stepAt(r, seq);
        h.why.push_back("rank " + std::to_string(r.rank) + " called " + op + " where " + ranksText(h.waiting) +
                        " called " + h.op + " at collective #" + std::to_string(seq) +
                        (stepAt(r, seq) >= 0 ? " (step " + std::to_string(stepAt(r, seq)) + ")" : ""));
      }
      h.summary = "collective desync: " + h.why.front();
      return h;
    }
    for (const auto& [op, rs] : by) before[op] += static_cast<int>(rs.size());
  }
  // The wavefront: the furthest collective issued; ranks that never issued it are the suspects.
  int64_t front = -1;
  for (const auto& r : ranks) front = std::max(front, lastIssued(r));
  bool anyWaiting = false;
  for (const auto& r : ranks) anyWaiting = anyWaiting || r.inFlight.has_value();
  if (front < 0) return std::nullopt;
  h.seq = static_cast<uint64_t>(front);
  for (const auto& r : ranks)
    if (lastIssued(r) == front) {
      h.waiting.push_back(r.rank);
      if (h.op.empty()) h.op = opAt(r, h.seq);
      if (h.step < 0) h.step = stepAt(r, h.seq);
    }
  int64_t maxSteps = 0;
  for (const auto& r : ranks) maxSteps = std::max(maxSteps, r.steps);
  std::string at = collectiveText(h.seq, h.op, h.step);
  for (const auto& r : ranks) {
    if (lastIssued(r) == front) continue;
    h.suspects.push_back(r.rank);
    if (h.location.empty()) h.location = r.stackLine;
    std::string who = "rank " + std::to_string(r.rank);
    std::string after = r.lastCompleted >= 0 ? " after completing collective #" + std::to_string(r.lastCompleted)
                                             : " before its first collective";
    if (r.exitCode) {
      std::string fewer =
          r.steps < maxSteps ? ", " + std::to_string(maxSteps - r.steps) + " step(s) fewer than the others" : "";
      h.why.push_back(who + " ended" + (*r.exitCode >= 0 ? " (exit " + std::to_string(*r.exitCode) + ")" : "") + after +
                      " at step " + std::to_string(r.steps) + fewer + ": it never issued " + at);
    } else if (!r.terminated && r.waitReason.empty()) {
      h.why.push_back(who + " died" + after +
                      ": its stream ends without an exit (killed by SIGKILL, e.g. kill -9 or the OOM killer, or "
                      "its machine was lost); it never issued " +
                      at);
    } else {
      h.why.push_back(
          who + " never reached " + at + ": stuck" + after + (r.stackLine.empty() ? "" : " at " + r.stackLine) +
          (r.waitedSeconds > 0 ? " (no collective for " + std::to_string(static_cast<int>(r.waitedSeconds)) + " s" +
                                     (r.terminated ? ", then stopped by SIGTERM)" : ")")
                               : ""));
    }
  }
  if (h.suspects.empty()) {
    // Every rank issued the same collectives, but some died there while the others were stopped
    // (by the launcher) or failed before issuing the next one: the dead are the suspects.
    std::vector<int> dead;
    bool othersStopped = false;
    for (const auto& r : ranks) {
      if (!r.exitCode && !r.terminated && r.waitReason.empty())
        dead.push_back(r.rank);
      else
        othersStopped = othersStopped || r.terminated || (r.exitCode && *r.exitCode != 0);
    }
    if (!dead.empty() && dead.size() < ranks.size() && othersStopped) {
      h.waiting.clear();
      for (const auto& r : ranks) {
        if (std::find(dead.begin(), dead.end(), r.rank) == dead.end()) {
          h.waiting.push_back(r.rank);
          continue;
        }
        h.suspects.push_back(r.rank);
        h.why.push_back("rank " + std::to_string(r.rank) + " died" +
                        (r.lastCompleted >= 0 ? " after completing collective #" + std::to_string(r.lastCompleted)
                                              : " before its first collective") +
                        ": its stream ends without an exit (killed by SIGKILL, e.g. kill -9 or the OOM killer, or "
                        "its machine was lost); " +
                        ranksText(h.waiting) + " stopped before the next collective");
      }
      h.summary = "distributed hang: " + h.why.front();
      return h;
    }
    if (!anyWaiting) return std::nullopt;  // they met everywhere
    h.summary = "every rank issued " + at + " and it did not complete (a deadlock in the collective or the network)";
    return h;
  }
  h.summary = "distributed hang: " + ranksText(h.waiting) + " waited in " + at + "; " + h.why.front();
  return h;
}

}  // namespace dlrr
