// dltrace export --chrome-trace: every recorded process's phases, steps, collectives and
// failures in the Trace Event Format (JSON), for Perfetto's UI or chrome://tracing.
#include <algorithm>
#include <climits>

#include "tools/common/Json.h"
#include "tools/dltrace/Commands.h"
#include "tools/dltrace/OutputFile.h"
#include "tools/dltrace/ReportData.h"

namespace dlrr::tools {
namespace {

// One thread row per kind of mark, so that spans never overlap within a row.
enum Row : int { kPhases = 1, kSteps = 2, kCollectives = 3, kFailures = 4 };

std::string chromeTrace(const ReportData& d) {
  int64_t t0 = INT64_MAX;
  for (const auto& r : d.timeline) t0 = std::min(t0, r.startNs);
  auto us = [&](int64_t ns) { return static_cast<double>(ns - t0) / 1e3; };
  std::string buf;
  JsonWriter j(buf, 0);
  j.beginObject();
  j.field("displayTimeUnit", std::string("ms"));
  j.key("traceEvents").beginArray();
  auto meta = [&](int pid, int tid, const char* what, const std::string& name) {
    j.beginObject();
    j.field("ph", std::string("M"));
    j.field("pid", pid);
    if (tid) j.field("tid", tid);
    j.field("name", std::string(what));
    j.key("args").beginObject();
    j.field("name", name);
    j.endObject();
    j.endObject();
  };
  for (const auto& r : d.timeline) {
    // Perfetto groups by pid; streams of one trace never share one.
    const int pid = r.pid;
    meta(pid, 0, "process_name",
         r.stream + (r.rank >= 0 ? " (rank " + std::to_string(r.rank) + ")" : std::string()) + " [" + r.role + "]");
    meta(pid, kPhases, "thread_name", "phases");
    meta(pid, kSteps, "thread_name", "steps");
    meta(pid, kCollectives, "thread_name", "collectives");
    meta(pid, kFailures, "thread_name", "failures");
    auto span = [&](int tid, const char* cat, const TimelineMark& m, int64_t end) {
      j.beginObject();
      j.field("ph", std::string("X"));
      j.field("cat", std::string(cat));
      j.field("name", m.name);
      j.field("pid", pid);
      j.field("tid", tid);
      j.field("ts", us(m.ns));
      j.field("dur", us(std::max(end, m.ns)) - us(m.ns));
      j.endObject();
    };
    auto instant = [&](int tid, const char* cat, const TimelineMark& m) {
      j.beginObject();
      j.field("ph", std::string("i"));
      j.field("s", std::string("t"));
      j.field("cat", std::string(cat));
      j.field("name", m.name);
      j.field("pid", pid);
      j.field("tid", tid);
      j.field("ts", us(m.ns));
      j.key("args").beginObject();
      j.field("detail", m.detail);
      j.endObject();
      j.endObject();
    };
    for (const auto& p : r.phases) span(kPhases, "phase", p, p.endNs);
    for (size_t k = 0; k < r.steps.size(); ++k) {
      const auto& s = r.steps[k];
      span(kSteps, "step", s, s.endNs >= 0 ? s.endNs : k + 1 < r.steps.size() ? r.steps[k + 1].ns : r.endNs);
    }
    for (const auto& c : r.collectives) instant(kCollectives, "collective", c);
    for (const auto& f : r.failures) instant(kFailures, "failure", f);
  }
  j.endArray();
  j.endObject();
  buf += '\n';
  return buf;
}

int run(const Args& args, Output&) {
  if (!args.has("--chrome-trace")) throw UsageError("export needs a format: --chrome-trace");
  auto out = args.value("-o");
  if (!out) throw UsageError("export needs -o FILE.json");
  auto trace = openTraceForTool(args.trace());
  writeOutputFile(*out, chromeTrace(gatherReport(*trace)));
  return kExitOk;
}

}  // namespace

CommandDef exportCommand() {
  return {"export",
          "the processes' phases, steps and collectives as a Chrome/Perfetto trace",
          "dltrace export TRACE --chrome-trace -o FILE.json",
          "Writes the trace's timeline in the Trace Event Format (JSON), which Perfetto\n"
          "(ui.perfetto.dev, offline too) and chrome://tracing open: one process per recorded\n"
          "stream (ranks named), with rows for its phases (start-up, epochs, shutdown), steps\n"
          "(duration events), collectives and failures (instant events). Times are microseconds\n"
          "since the first stream started.\n"
          "\n"
          "  --chrome-trace   the format (the only one)\n"
          "  -o FILE          the file to write (- for stdout)\n",
          {{"--chrome-trace", OptSpec::Type::Flag}, {"-o", OptSpec::Type::Value}},
          run};
}

}  // namespace dlrr::tools
