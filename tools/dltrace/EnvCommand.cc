// dltrace env / env-diff: the recorded environment, and what differs on this machine.
#include "tools/common/FactJson.h"
#include "tools/common/Json.h"
#include "tools/common/Text.h"
#include "tools/dltrace/Commands.h"
#include "triage/Environment.h"
#include "triage/Names.h"
#include "triage/TraceFacts.h"

namespace dlrr::tools {
namespace {

std::string joinArgv(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    bool quote = a.empty() || a.find_first_of(" \t'\"\\$") != std::string::npos;
    out += quote ? "'" + printable(a) + "'" : printable(a);
  }
  return out;
}

std::string peakText(const triage::ResourceRecord& r) {
  std::string out = r.reason + ": max RSS " + triage::bytesText(r.maxRss);
  if (r.vmPeak) out += ", peak virtual " + triage::bytesText(r.vmPeak);
  if (r.addressSpaceLimit) out += ", ulimit -v " + triage::bytesText(r.addressSpaceLimit);
  if (r.memoryLimit) out += ", cgroup limit " + triage::bytesText(r.memoryLimit);
  if (r.memTotal) out += ", machine " + triage::bytesText(r.memTotal);
  for (const auto& g : r.gpus)
    out += "; cuda:" + std::to_string(g.device) + " allocated " + triage::bytesText(g.maxAllocated) + ", reserved " +
           triage::bytesText(g.maxReserved) + " of " + triage::bytesText(g.total);
  return out;
}

void peakJson(JsonWriter& j, const triage::ResourceRecord& r) {
  j.beginObject();
  j.field("reason", r.reason);
  j.field("max_rss_bytes", r.maxRss);
  j.field("vm_peak_bytes", r.vmPeak);
  j.field("address_space_limit", r.addressSpaceLimit);
  j.field("memory_limit", r.memoryLimit);
  j.field("mem_total", r.memTotal);
  j.key("gpus").beginArray();
  for (const auto& g : r.gpus) {
    j.beginObject();
    j.field("device", g.device);
    j.field("max_allocated", g.maxAllocated);
    j.field("max_reserved", g.maxReserved);
    j.field("total", g.total);
    j.endObject();
  }
  j.endArray();
  j.endObject();
}

int runEnv(const Args& args, Output& out) {
  auto trace = openTraceForTool(args.trace());
  triage::RecordedEnvironment env = triage::recordedEnvironment(*trace);
  if (args.has("--json")) {
    std::string buf;
    JsonWriter j(buf, 2);
    j.beginObject();
    j.field("trace", trace->path());
    j.key("launcher").beginObject();
    j.field("host", env.host);
    j.field("user", env.user);
    j.field("uid", env.uid);
    j.field("created_ns", env.createdNs);
    j.field("created", formatTime(env.createdNs));
    j.key("command").beginArray();
    for (const auto& a : env.command) j.value(a);
    j.endArray();
    j.field("cwd", env.cwd);
    j.field("cpu_model", env.cpuModel);
    j.field("cpu_count", env.cpuCount);
    j.field("kernel", env.kernel);
    j.field("capture", env.captureMode);
    j.key("options").beginObject();
    for (const auto& [k, v] : env.options) writeFactValue(j.key(k), k, v);
    j.endObject();
    j.endObject();
    j.key("env").beginObject();
    for (const auto& [k, v] : env.env) j.field(k, v);
    j.endObject();
    j.key("redacted").beginArray();
    for (const auto& n : env.redactedNames) j.value(n);
    j.endArray();
    j.key("processes").beginArray();
    for (const auto& p : env.processes) {
      j.beginObject();
      j.field("stream", p.stream);
      j.key("argv").beginArray();
      for (const auto& a : p.argv) j.value(a);
      j.endArray();
      j.key("runtime").beginObject();
      for (const auto& [k, v] : p.runtime) writeFactValue(j.key(k), k, v);
      j.endObject();
      j.key("packages").beginArray();
      for (const auto& pk : p.packages) {
        j.beginObject();
        j.field("name", pk.name);
        j.field("version", pk.version);
        j.field("path", pk.path);
        j.endObject();
      }
      j.endArray();
      j.key("resource_peaks").beginArray();
      for (const auto& r : p.peaks) peakJson(j, r);
      j.endArray();
      j.endObject();
    }
    j.endArray();
    j.endObject();
    buf += '\n';
    out.write(buf);
    return kExitOk;
  }
  auto row = [&](const std::string& k, const std::string& v) {
    out.line("  " + k + std::string(k.size() < 12 ? 12 - k.size() : 1, ' ') + printable(v));
  };
  out.line("recorded by dlrecord");
  row("host", env.host + " (user " + env.user + ", uid " + std::to_string(env.uid) + ")");
  row("created", formatTime(env.createdNs));
  row("command", joinArgv(env.command));
  row("cwd", env.cwd);
  row("cpu", env.cpuModel + " (" + std::to_string(env.cpuCount) + " online)");
  row("kernel", env.kernel);
  std::string opts = env.captureMode;
  for (const auto& [k, v] : env.options) opts += ", " + k + "=" + v;
  row("capture", opts);
  out.line("environment (" + std::to_string(env.env.size()) + " variables, " +
           std::to_string(env.redactedNames.size()) + " redacted)");
  for (const auto& [k, v] : env.env) out.line("  " + printable(k) + "=" + printable(v));
  for (const auto& p : env.processes) {
    out.line("process " + p.stream + ": " + joinArgv(p.argv));
    for (const auto& [k, v] : p.runtime) row(k, v);
    if (!p.packages.empty()) {
      out.line("  packages imported (" + std::to_string(p.packages.size()) + ")");
      for (const auto& pk : p.packages)
        out.line("    " + printable(pk.name) + (pk.version.empty() ? "" : " " + printable(pk.version)) +
                 (pk.path.empty() ? "" : "  " + printable(pk.path)));
    }
    for (const auto& r : p.peaks)
      if (r.reason != "step") row("resources", peakText(r));
  }
  return kExitOk;
}

int runEnvDiff(const Args& args, Output& out) {
  auto trace = openTraceForTool(args.trace());
  triage::RecordedEnvironment rec = triage::recordedEnvironment(*trace);
  triage::TriageInput facts = triage::gatherFacts(*trace);
  triage::ProbeOptions opt;
  opt.runPython = !args.has("--no-python");
  if (auto py = args.value("--python")) opt.python = *py;
  std::vector<std::string> notes;
  triage::EnvFacts cur = triage::currentEnvironment(rec, opt, notes);
  auto diffs = triage::diffEnvironments(rec.facts, cur);
  auto paths = triage::checkPaths(rec, facts);
  diffs.insert(diffs.end(), paths.begin(), paths.end());
  if (args.has("--json")) {
    std::string buf;
    JsonWriter j(buf, 2);
    j.beginObject();
    j.field("trace", trace->path());
    j.key("differences").beginArray();
    for (const auto& d : diffs) {
      j.beginObject();
      j.field("key", d.key);
      writeFactValue(j.key("recorded"), d.key, d.recorded);
      writeFactValue(j.key("current"), d.key, d.current);
      j.field("impact", std::string(triage::impactId(d.impact)));
      j.field("why", d.why);
      j.endObject();
    }
    j.endArray();
    j.key("recorded").beginObject();
    for (const auto& [k, v] : rec.facts) writeFactValue(j.key(k), k, v);
    j.endObject();
    j.key("current").beginObject();
    for (const auto& [k, v] : cur) writeFactValue(j.key(k), k, v);
    j.endObject();
    j.key("notes").beginArray();
    for (const auto& n : notes) j.value(n);
    j.endArray();
    j.endObject();
    buf += '\n';
    out.write(buf);
    return diffs.empty() ? kExitOk : kExitNegative;
  }
  for (const auto& n : notes) out.line("note: " + printable(n));
  if (diffs.empty()) {
    out.line("no differences that matter: this machine matches the recording");
    return kExitOk;
  }
  for (const auto& d : diffs) {
    const char* tag = d.impact == triage::Impact::Breaks    ? "BREAKS"
                      : d.impact == triage::Impact::Matters ? "matters"
                                                            : "info";
    out.line(std::string(tag) + std::string(8 - std::string(tag).size(), ' ') + printable(d.key) + ": recorded " +
             printable(d.recorded) + ", here " + printable(d.current));
    if (!d.why.empty()) out.line("        " + printable(d.why));
  }
  return kExitNegative;
}

}  // namespace

CommandDef envCommand() {
  return {"env",
          "the recorded environment: host, command, env, CPU, Python/torch/CUDA, packages",
          "dltrace env TRACE [--json]",
          "Shows the environment the trace was recorded in: the launcher's facts (host, user, command,\n"
          "working directory, environment variables with secrets redacted, CPU, kernel, capture\n"
          "options) and, per recorded process, its runtime facts (Python, torch, NumPy, BLAS, thread\n"
          "counts, CUDA/cuDNN/GPU, determinism flags), the packages it imported and its resource peaks.\n"
          "\n"
          "  --json   one JSON object (keys: launcher, env, redacted, processes)\n",
          {{"--json", OptSpec::Type::Flag}},
          runEnv};
}

CommandDef envDiffCommand() {
  return {"env-diff",
          "what differs between the recorded environment and this machine, and why it matters",
          "dltrace env-diff TRACE [--json] [--no-python] [--python PATH]",
          "Compares the recorded environment with this machine: Python, torch, NumPy and the imported\n"
          "packages' versions (asked of this machine's /usr/bin/python3, else python3 on PATH; the\n"
          "recorded command is never run), BLAS, CUDA/cuDNN/GPU/driver, thread and CPU counts, key\n"
          "variables (OMP_NUM_THREADS, CUDA_VISIBLE_DEVICES, PYTHONHASHSEED, LD_LIBRARY_PATH, PATH,\n"
          "LANG, ...), and the paths the job used or missed (working directory, script, packages,\n"
          "missing paths that exist now, libraries that failed to load). Each difference says\n"
          "whether it breaks bit-exact replay, matters for a rerun, or is informational.\n"
          "\n"
          "  --no-python    do not start Python: versions from the packages' files (fast)\n"
          "  --python PATH  the interpreter to ask (e.g. the job's own virtualenv's python)\n"
          "  --json         one JSON object (keys: differences, recorded, current, notes)\n"
          "\n"
          "exit status: 0 nothing differs, 1 differences were found\n",
          {{"--json", OptSpec::Type::Flag}, {"--no-python", OptSpec::Type::Flag}, {"--python", OptSpec::Type::Value}},
          runEnvDiff};
}

}  // namespace dlrr::tools
