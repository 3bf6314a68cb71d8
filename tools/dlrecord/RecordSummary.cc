#include "tools/dlrecord/RecordSummary.h"

#include "format/Trace.h"
#include "format/TraceError.h"
#include "tools/common/Text.h"
#include "triage/Ranks.h"

namespace dlrr {
namespace {

// Bytes of the failure in the summary line: room for an exception's type, its first line and
// its last.
constexpr size_t kSummaryFailureMax = 300;

// The job died importing torch or what torch jobs need: most often it ran under a Python that
// lacks them (a venv's or pyenv's python3 first on PATH). "" otherwise.
std::string importWarning(const FailureInfo& f, StreamReader* stream) {
  if (f.exceptionType != "ModuleNotFoundError" && f.exceptionType != "ImportError") return "";
  std::string module;
  for (const char* m : {"torch", "numpy", "torchvision"}) {
    const std::string q = std::string("'") + m;
    size_t at = f.message.find("No module named " + q);
    if (at != std::string::npos &&
        (f.message.compare(at + 16 + q.size(), 1, "'") == 0 || f.message.compare(at + 16 + q.size(), 1, ".") == 0)) {
      module = m;
      break;
    }
  }
  if (module.empty()) return "";
  std::string exe = stream ? stream->header().getExe().cStr() : "";
  return "dlrecord: warning: the job died importing " + module + ": its Python" +
         (exe.empty() ? std::string() : " (" + tools::printable(exe) + ")") + " does not have it. Run the job with " +
         "a Python that has torch and numpy (on Debian: /usr/bin/python3 with python3-torch; see the README)";
}

}  // namespace

std::vector<std::string> recordSummary(const std::string& trace, const std::vector<std::string>& shown) {
  std::vector<std::string> out;
  try {
    auto t = Trace::open(trace, OpenMode::Tolerant);
    TraceSummary s = t->summarize();
    uint64_t bulk = 0;  // a budgeted trace's periodic snapshots, beside the streams (format/TraceDir.h)
    for (auto& st : t->streams()) bulk += st->bulkBytes();
    std::string line = "dlrecord: trace " + tools::printable(trace) + ": " + std::to_string(s.steps) + " step" +
                       (s.steps == 1 ? "" : "s") +
                       // Steps that trained nothing (evaluation with gradients on): replay verifies them too.
                       (s.untrainedSteps ? " (+" + std::to_string(s.untrainedSteps) + " untrained)" : "") + ", " +
                       tools::humanBytes(s.bytes + bulk);
    RankReport ranks = analyzeRanks(*t);
    // One line whatever the job raised (a DataLoader worker's exception carries a traceback);
    // `dltrace info` / `events` show the whole message.
    if (ranks.origin)
      line += "; first non-finite value: " + tools::printableSummary(formatOrigin(*ranks.origin), kSummaryFailureMax);
    else if (s.failure)
      line += "; " + tools::printableSummary(formatFailure(*s.failure), kSummaryFailureMax);
    if (ranks.distributed()) line += " (" + std::to_string(ranks.ranks.size()) + " rank streams)";
    if (s.mainStream.empty()) line += "; no process recorded anything (not a Python/torch job?)";
    // Notes the status pipe did not already deliver (e.g. "no steps captured: ...").
    for (const auto& n : s.notes) {
      bool said = false;
      for (const auto& p : shown) said = said || n.find(p.substr(p.find(": ") + 2)) != std::string::npos;
      if (!said) out.push_back("dlrecord: note: " + tools::printable(n));
    }
    out.push_back(line);
    if (s.failure && !ranks.origin)
      if (std::string w = importWarning(*s.failure, t->find(s.failure->stream)); !w.empty()) out.push_back(w);
  } catch (const TraceError& e) {
    out.push_back("dlrecord: trace " + trace + " is not readable: " + e.what());
  }
  return out;
}

}  // namespace dlrr
