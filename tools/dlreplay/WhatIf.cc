#include "tools/dlreplay/WhatIf.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>

#include "tools/common/Args.h"
#include "tools/common/Json.h"
#include "tools/common/Text.h"
#include "tools/dlreplay/ReplayOutcome.h"
#include "tools/dlreplay/ReportJson.h"

namespace dlrr {
namespace {

void printLines(const char* prefix, const std::string& v) {
  size_t start = 0;
  while (start < v.size()) {
    size_t nl = v.find('\n', start);
    if (nl == std::string::npos) nl = v.size();
    std::fprintf(stderr, "%s%s\n", prefix, tools::printable(std::string_view(v).substr(start, nl - start)).c_str());
    start = nl + 1;
  }
}

}  // namespace

WhatIfOutcome decideWhatIf(const ReplayReport& r, int waitStatus, const std::string& intervention) {
  WhatIfOutcome o;
  if (!r.attached) {
    o.exitCode = kExitNoReplay;
    o.outcome = "not-attached";
    o.message = "the replayed process never attached to the trace";
    return o;
  }
  if (r.divergence) {  // before the change: the replay itself did not hold, so no what-if ran
    o.exitCode = kExitDivergence;
    o.outcome = "divergence";
    o.message = "diverged at step " + std::to_string(r.divergence->step) + " before the change: " + r.divergence->kind +
                " " + r.divergence->path + ": " + r.divergence->detail;
    return o;
  }
  if (!r.whatIfVerdict) {
    o.exitCode = kExitNotReached;
    o.outcome = "not-reached";
    o.message = "the change was never applied: the job ended before its step";
    if (WIFSIGNALED(waitStatus)) o.message += " (it died of signal " + std::to_string(WTERMSIG(waitStatus)) + ")";
    return o;
  }
  bool recurred = r.whatIfVerdict->rfind("recurred", 0) == 0;
  o.exitCode = recurred ? kExitWhatIfRecurred : kExitOk;
  o.outcome = recurred ? "recurred" : "prevented";
  o.message = "what-if " + intervention + ": the failure " + *r.whatIfVerdict;
  return o;
}

void printWhatIfText(const ReplayReport& r, const WhatIfOutcome& o, const ReplayFiles& files) {
  std::fprintf(stderr, "dlreplay: %s\n", tools::printableSummary(o.message, 600).c_str());
  if (r.whatIfChange) printLines("dlreplay:   change: ", *r.whatIfChange);
  if (r.whatIfLosses) {
    std::fprintf(stderr, "dlreplay:   loss (recorded -> with the change):\n");
    printLines("dlreplay:     ", *r.whatIfLosses);
  }
  std::fprintf(stderr,
               "dlreplay:   the steps from the change on were not verified: they differ from the recording on "
               "purpose, which says nothing about the trace\n");
  files.print(stderr);
  for (const auto& w : r.warnings) printLines("dlreplay: warning: ", w);
}

void printWhatIfJson(const ReplayReport& r, const WhatIfOutcome& o, const std::string& intervention,
                     const ReplayFiles& files) {
  std::string out;
  tools::JsonWriter j(out, 0);
  j.beginObject();
  j.field("outcome", o.outcome);
  j.field("exit_code", o.exitCode);
  j.field("message", o.message);
  j.key("what_if").beginObject();
  j.field("intervention", intervention);
  j.field("change", r.whatIfChange.value_or(""));
  j.field("verdict", r.whatIfVerdict.value_or(""));
  j.field("losses", r.whatIfLosses.value_or(""));
  j.endObject();
  j.field("verified_steps", static_cast<long long>(r.verifiedSteps));
  j.key("report");
  writeReportJson(j, r);
  files.json(j);
  j.endObject();
  std::printf("%s\n", out.c_str());
}

}  // namespace dlrr
