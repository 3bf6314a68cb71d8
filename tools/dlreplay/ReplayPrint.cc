#include "tools/dlreplay/ReplayPrint.h"

#include <algorithm>
#include <cstdio>
#include <string_view>

#include "tools/common/Json.h"
#include "tools/common/Text.h"
#include "tools/dlreplay/ReportJson.h"

namespace dlrr {
namespace {

// Recorded text (an exception message, a traceback) shown in one of dlreplay's lines: first and
// last line, escaped (as dlrecord's summary line).
constexpr size_t kSummaryTextMax = 300;

// Each line of a multi-line value (a repeated key holds one value a line), escaped.
void printLines(const char* prefix, const std::string& v) {
  size_t start = 0;
  while (start < v.size()) {
    size_t nl = v.find('\n', start);
    if (nl == std::string::npos) nl = v.size();
    std::fprintf(stderr, "%s%s\n", prefix, tools::printable(std::string_view(v).substr(start, nl - start)).c_str());
    start = nl + 1;
  }
}

// The report's details worth a line: where it stopped, the batch, the environment, launches,
// the GPU, what could not be verified (torch.compile'd submodules), distributed state.
bool shownDetail(const std::string& k) {
  for (const char* p : {"stop.", "batch.", "backward.", "env.", "launch.", "gpu.", "verify."})
    if (k.rfind(p, 0) == 0) return true;
  return k.rfind("dist.", 0) == 0 && k != "dist.rank";
}

}  // namespace

void printReplayText(const ReplayResult& r, const ReplayFiles& files) {
  const std::string verified = std::to_string(r.report.verifiedSteps);
  std::string jumped = r.jumpStep < 0 ? ""
                                      : " (jumped to step " + std::to_string(r.jumpStep) +
                                            ": steps before it were fast-forwarded, not verified)";
  std::fprintf(stderr, "dlreplay: %s; %s of %llu recorded steps verified bit-exact%s\n", r.outcome.message.c_str(),
               verified.c_str(), static_cast<unsigned long long>(r.recordedSteps), jumped.c_str());
  if (r.check) {
    const auto& ci = triage::categoryInfo(r.triage.category);
    std::fprintf(stderr, "dlreplay: %s\n", r.check->text.c_str());
    const char* kind = r.triage.determinism == triage::Determinism::Deterministic ? ", a deterministic kind of failure"
                       : r.triage.determinism == triage::Determinism::NonDeterministic
                           ? ", a non-deterministic kind of failure"
                           : "";
    if (r.determinismUnshown)
      std::fprintf(stderr, "dlreplay: triage: %s [%s]; determinism not known: this replay did not reproduce it\n",
                   ci.name, triage::dimensionName(r.triage.dimension));
    else if (!r.determinism.empty() && r.triage.determinism == triage::Determinism::Deterministic)
      // Racing trainers or unrecorded processes: one stream reproducing it shows no determinism,
      // so the category's "replay reproduces it bit for bit" is not said either.
      std::fprintf(stderr, "dlreplay: triage: %s [%s]; determinism cannot be claimed for this job\n", ci.name,
                   triage::dimensionName(r.triage.dimension));
    else
      std::fprintf(stderr, "dlreplay: triage: %s [%s]%s%s%s%s\n", ci.name, triage::dimensionName(r.triage.dimension),
                   kind, *ci.why ? " (" : "", ci.why, *ci.why ? ")" : "");
    if (r.triage.determinism == triage::Determinism::NonDeterministic && r.check->reproduced)
      std::fprintf(stderr, "dlreplay: it reproduced here; on another node or with other co-tenants it may not\n");
  }
  for (const auto& [k, v] : reportEntries(r.report)) {
    if (!shownDetail(k)) continue;
    std::string name = k.substr(k.find('.') + 1);
    if (k == "stop.step" && v == "-") {  // it stopped between steps: say which, not "-"
      // Verified steps are consecutive from the jump step (0 without a jump).
      const int64_t first = std::max<int64_t>(r.jumpStep, 0);
      std::string at =
          r.report.divergence && r.report.divergence->step >= 0
              ? std::to_string(r.report.divergence->step) + " (diverged; no step open when it stopped)"
          : r.outcome.verified
              ? "none open (after step " + std::to_string(first + static_cast<int64_t>(r.outcome.verified) - 1) + ")"
          : first > 0 ? "none (before step " + std::to_string(first) + ", the jump's)"
                      : "none (before the first step)";
      std::fprintf(stderr, "dlreplay:   step: %s\n", at.c_str());
      continue;
    }
    if (k == "stop.where") {  // may end in an exception's message: one line
      std::fprintf(stderr, "dlreplay:   %s: %s\n", name.c_str(), tools::printableSummary(v, kSummaryTextMax).c_str());
      continue;
    }
    printLines(("dlreplay:   " + name + ": ").c_str(), v);
  }
  // The failure explained (nan target): in reading order, not the report's key order.
  const auto entries = reportEntries(r.report);
  if (entries.count("explain.op") || entries.count("explain.cause"))
    std::fprintf(stderr, "dlreplay: the first non-finite value, replayed op by op:\n");
  for (const char* k : {"explain.op", "explain.line", "explain.inputs", "explain.cause", "explain.history"})
    if (auto it = entries.find(k); it != entries.end())
      printLines(("dlreplay:   " + std::string(k + 8) + ": ").c_str(), it->second);
  files.print(stderr);
  std::string warnings;  // one a line, as printLines splits them
  for (const auto& w : r.report.warnings) warnings += (warnings.empty() ? "" : "\n") + w;
  printLines("dlreplay: warning: ", warnings);
}

void printReplayJson(const ReplayResult& r, const ReplayFiles& files) {
  std::string out;
  tools::JsonWriter j(out, 0);  // one line, after whatever the job printed
  j.beginObject();
  j.field("outcome", r.exitCode == kExitOk           ? "reached"
                     : r.exitCode == kExitDivergence ? "divergence"
                     : r.exitCode == kExitNoReplay   ? "not-attached"
                     : r.exitCode == kExitTraceCut   ? "trace-cut"
                                                     : "not-reached");
  j.field("exit_code", r.exitCode);
  j.field("target", r.target);
  j.field("message", r.outcome.message);
  j.field("verified_steps", static_cast<long long>(r.report.verifiedSteps));
  j.field("recorded_steps", static_cast<long long>(r.recordedSteps));
  j.field("jump_step", static_cast<long long>(r.jumpStep));
  j.field("determinism", r.determinism);
  if (r.check) {
    j.key("check").beginObject();
    j.field("reproduced", r.check->reproduced);
    j.field("verdict", r.check->text);
    j.field("category", std::string(triage::categoryInfo(r.triage.category).id));
    j.field("determinism", std::string(triage::determinismId(r.triage.determinism)));
    j.endObject();
  }
  j.key("report");
  writeReportJson(j, r.report);
  files.json(j);
  j.endObject();
  std::printf("%s\n", out.c_str());
}

}  // namespace dlrr
