// dltrace triage: what kind of failure a trace recorded (the ICSE 2020 study's taxonomy), the
// evidence, where in the job, the work lost, and whether retrying helps. The rules live in
// triage/Classifier.cc; this file only prints.
#include "tools/common/Json.h"
#include "tools/common/Text.h"
#include "tools/dltrace/Commands.h"
#include "triage/Classifier.h"
#include "triage/TraceFacts.h"

namespace dlrr::tools {
namespace {

void writeJson(Output& out, const std::string& path, const triage::TriageInput& in, const triage::TriageResult& r) {
  const auto& info = triage::categoryInfo(r.category);
  std::string buf;
  JsonWriter j(buf, 2);
  j.beginObject();
  j.field("trace", path);
  j.field("category", std::string(info.id));
  j.field("category_name", std::string(info.name));
  j.field("dimension", std::string(triage::dimensionId(r.dimension)));
  j.field("dimension_name", std::string(triage::dimensionName(r.dimension)));
  j.field("summary", r.summary);
  j.key("evidence").beginArray();
  for (const auto& e : r.evidence) j.value(e);
  j.endArray();
  j.field("phase", std::string(triage::phaseId(r.phase)));
  j.field("where", r.where);
  j.key("step");
  if (r.step >= 0)
    j.value(r.step);
  else
    j.null();
  j.field("location", r.location);
  j.key("lost").beginObject();
  j.key("wall_seconds");
  if (r.wallSeconds >= 0)
    j.value(r.wallSeconds);
  else
    j.null();
  j.key("init_seconds");
  if (r.initSeconds >= 0)
    j.value(r.initSeconds);
  else
    j.null();
  j.key("training_seconds");
  if (r.trainingSeconds >= 0)
    j.value(r.trainingSeconds);
  else
    j.null();
  j.field("steps", r.stepsCompleted);
  j.field("text", r.lost);
  j.endObject();
  j.field("determinism", std::string(triage::determinismId(r.determinism)));
  j.field("retry", r.retry);
  j.field("advice", r.advice);
  j.key("exit_code");
  if (in.exitCode)
    j.value(*in.exitCode);
  else
    j.null();
  j.field("stream", in.stream);
  j.key("failure");
  if (in.failure) {
    j.beginObject();
    j.field("kind", in.failure->kind);
    j.field("exception_type", in.failure->exceptionType);
    j.field("message", in.failure->message);
    j.field("signal", in.failure->signal);
    j.field("step", in.failure->step);
    j.endObject();
  } else {
    j.null();
  }
  j.endObject();
  buf += '\n';
  out.write(buf);
}

void writeText(Output& out, const triage::TriageInput& in, const triage::TriageResult& r) {
  const auto& info = triage::categoryInfo(r.category);
  auto row = [&](const char* k, const std::string& v) {
    if (!v.empty()) out.line(std::string(k) + std::string(12 - std::string(k).size(), ' ') + printable(v));
  };
  row("failure", r.summary);
  if (r.category == triage::Category::None) {
    row("category", std::string("none (") + info.name + ")");
    for (const auto& e : r.evidence) row("evidence", e);
    row("lost", r.lost);
    return;
  }
  row("category", std::string(info.name) + "  [" + triage::dimensionName(r.dimension) + "]");
  bool first = true;
  for (const auto& e : r.evidence) {
    out.line((first ? std::string("evidence    ") : std::string("            ")) + printable(e));
    first = false;
  }
  row("where", r.where);
  row("location", r.location);
  row("lost", r.lost);
  row("retry", r.retry);
  row("advice", r.advice);
  (void)in;
}

int run(const Args& args, Output& out) {
  auto trace = openTraceForTool(args.trace());
  triage::TriageInput in = triage::gatherFacts(*trace);
  triage::TriageResult r = triage::classify(in);
  if (args.has("--json"))
    writeJson(out, trace->path(), in, r);
  else
    writeText(out, in, r);
  return kExitOk;
}

}  // namespace

CommandDef triageCommand() {
  return {"triage",
          "what kind of failure: category, evidence, where, work lost, retry advice",
          "dltrace triage TRACE [--json]",
          "Names the recorded failure's category and dimension in the taxonomy of the ICSE 2020 study\n"
          "of failed deep-learning jobs (execution environment, deep-learning specific, general code\n"
          "error, data), with the evidence (the exception, missing or denied paths, libraries that did\n"
          "not load, memory peaks and limits, package versions), where in the job it happened\n"
          "(initialisation, training step N, evaluation, shutdown), the work lost before it, and\n"
          "whether a retry can help (deterministic or not). See docs/triage.md.\n"
          "\n"
          "  --json   one JSON object (keys: category, category_name, dimension, summary, evidence,\n"
          "           phase, where, step, location, lost, determinism, retry, advice, exit_code)\n",
          {{"--json", OptSpec::Type::Flag}},
          run};
}

}  // namespace dlrr::tools
