// dltrace info: what a trace is (command, host, processes, steps, size, failure) at a glance.
#include <cstdio>
#include <functional>
#include <optional>
#include <string>

#include "format/BatchMap.h"
#include "format/StreamBatchMap.h"
#include "format/Trace.h"
#include "format/TraceError.h"
#include "format/ValueBlobs.h"
#include "tools/common/Json.h"
#include "tools/common/Text.h"
#include "tools/dltrace/Commands.h"
#include "triage/Concurrency.h"
#include "triage/Ranks.h"
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

std::string ratio(uint64_t raw, uint64_t stored) {
  if (stored == 0) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.2fx", static_cast<double>(raw) / static_cast<double>(stored));
  return b;
}

struct SnapshotRow {
  int64_t step;
  bool failure;
  uint64_t tensorBytes;
  uint64_t newBytes;
  bool dropped;  // its tensors are gone (a budgeted trace dropped its bulk file): it starts nothing
};

// Jump replay's snapshots in the main stream (a damaged tail ends the list).
std::vector<SnapshotRow> snapshotsOf(Trace& trace, const TraceSummary& s) {
  std::vector<SnapshotRow> rows;
  StreamReader* r = s.mainStream.empty() ? nullptr : trace.find(s.mainStream);
  if (!r) return rows;
  try {
    r->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
      if (!e.isSnapshot()) return;
      auto sn = e.getSnapshot();
      rows.push_back({sn.getStep(), sn.getReason() == schema::Snapshot::Reason::FAILURE, sn.getTensorBytes(),
                      sn.getNewBytes(), !valueBlobsPresent(*r, sn.getValue())});
    });
  } catch (const TraceError&) {  // best effort: damage: the snapshots before it are listed
  }
  return rows;
}

// Bytes of the streams' bulk files (format/TraceDir.h): a budgeted trace's periodic snapshots.
uint64_t bulkBytesOf(Trace& trace) {
  uint64_t n = 0;
  for (auto& st : trace.streams()) n += st->bulkBytes();
  return n;
}

// Bounded traces: which steps replay with the dataset present and which without it.
BatchMap batchMapOf(Trace& trace, const TraceSummary& s) {
  StreamReader* r = s.mainStream.empty() ? nullptr : trace.find(s.mainStream);
  return r ? batchMapOf(*r) : BatchMapBuilder().build();
}

std::string pad(const std::string& s, size_t w) { return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' '); }

// When the failing step's failure-ring tensors did not all reach the trace: how many did, and
// why the rest are missing (the process ended while writing them). "" when none are missing.
std::string missingRingTensors(const TraceSummary& s) {
  const FailureInfo* f = s.failure ? &*s.failure : nullptr;
  if (!f || f->ringWritten >= f->ringTensors) return "";
  std::optional<int> code;
  for (const auto& p : s.processes)
    if (p.name == f->stream) code = p.exitCode;
  if (!code || *code < 0) code = s.exitCode;  // the process's own exit unrecorded: its launcher saw it
  std::string why = code && *code > 128 ? "the process was killed (signal " + std::to_string(*code - 128) + ")"
                    : code              ? "the process exited (code " + std::to_string(*code) + ")"
                                        : "the process ended (no exit recorded: killed)";
  return std::to_string(f->ringWritten) + " of " + std::to_string(f->ringTensors) + " failure-ring tensors of step " +
         std::to_string(f->step) + " written: " + why + " while they were being written";
}

// The failure-ring tensors left out because their bytes changed after their hook (an in-place
// operation on a module output: the ring holds outputs by reference, docs/recording.md). "" when none.
std::string changedRingTensors(const TraceSummary& s) {
  if (!s.failure || !s.failure->ringChanged) return "";
  return std::to_string(s.failure->ringChanged) +
         " failure-ring tensors left out: changed in place or freed after their module's hook (not the bytes it "
         "digested)";
}

void writeJson(Output& out, Trace& trace, const TraceSummary& s, const RankReport& ranks, const Concurrency& conc,
               const std::string& dlrrVersion, const std::vector<SnapshotRow>& snaps,
               const std::vector<std::string>& culprits, const BatchMap& map) {
  std::string buf;
  JsonWriter j(buf, 2);
  j.beginObject();
  j.field("trace", trace.path());
  j.field("format_version", s.formatVersion);
  j.field("dlrr_version", dlrrVersion);
  j.key("command").beginArray();
  for (const auto& a : s.command) j.value(a);
  j.endArray();
  j.field("host", s.host);
  j.field("user", s.user);
  j.field("created_ns", s.createdNs);
  j.field("created", formatTime(s.createdNs));
  j.key("exit_code");
  if (s.exitCode)
    j.value(*s.exitCode);
  else
    j.null();
  j.field("steps", s.steps);
  j.field("untrained_steps", s.untrainedSteps);
  j.field("main_stream", s.mainStream);
  if (map.byReference) j.field("replay_map", map.describe());
  j.key("snapshots").beginArray();
  for (const auto& sn : snaps) {
    j.beginObject();
    j.field("step", sn.step);
    j.field("reason", std::string(sn.failure ? "failure" : "periodic"));
    j.field("tensor_bytes", sn.tensorBytes);
    j.field("new_bytes", sn.newBytes);
    j.field("dropped", sn.dropped);
    j.endObject();
  }
  j.endArray();
  j.key("failure");
  if (s.failure) {
    j.beginObject();
    j.field("kind", s.failure->kind);
    j.field("step", s.failure->step);
    j.field("where", s.failure->where);
    j.field("message", s.failure->message);
    j.field("exception_type", s.failure->exceptionType);
    j.field("signal", s.failure->signal);
    j.field("stream", s.failure->stream);
    j.field("summary", formatFailure(*s.failure));
    j.field("ring_tensors", s.failure->ringTensors);
    j.field("ring_tensors_written", s.failure->ringWritten);
    j.field("ring_tensors_missing", missingRingTensors(s));
    j.field("ring_tensors_changed", s.failure->ringChanged);
    j.endObject();
  } else {
    j.null();
  }
  j.key("culprit_samples").beginArray();
  for (const auto& c : culprits) j.value(c);
  j.endArray();
  j.key("processes").beginArray();
  for (const auto& p : s.processes) {
    j.beginObject();
    j.field("stream", p.name);
    j.field("role", p.role);
    j.field("pid", p.pid);
    j.field("ppid", p.ppid);
    j.key("argv").beginArray();
    for (const auto& a : p.argv) j.value(a);
    j.endArray();
    j.field("clean", p.cleanClose);
    j.key("damage");
    if (p.damage.empty())
      j.null();
    else
      j.value(p.damage);
    j.field("torn", p.torn);
    j.field("events", p.events);
    j.field("steps", p.steps);
    j.key("exit_code");
    if (p.exitCode)
      j.value(*p.exitCode);
    else
      j.null();
    j.field("stored_bytes", p.bytes);
    j.field("raw_bytes", p.rawBytes);
    j.field("file_bytes", p.fileBytes);
    j.endObject();
  }
  j.endArray();
  j.key("unreadable_streams").beginArray();
  for (const auto& b : s.broken) {
    j.beginObject();
    j.field("stream", b.name);
    j.field("error", std::string(errorKindName(b.kind)));
    j.field("message", b.message);
    j.field("torn", b.torn);
    j.endObject();
  }
  j.endArray();
  j.key("bytes").beginObject();
  j.field("stored", s.bytes);
  j.field("raw", s.rawBytes);
  j.field("files", s.fileBytes);
  j.field("bulk_files", bulkBytesOf(trace));
  j.field("ratio", s.bytes ? static_cast<double>(s.rawBytes) / static_cast<double>(s.bytes) : 0.0);
  j.endObject();
  j.key("notes").beginArray();
  for (const auto& n : s.notes) j.value(n);
  j.endArray();
  j.key("concurrency").beginObject();
  j.key("trainers").beginArray();
  for (const auto& t : conc.trainers) j.value(t);
  j.endArray();
  j.key("unrecorded").beginArray();
  for (const auto& u : conc.unrecorded) {
    j.beginObject();
    j.field("pid", u.pid);
    j.field("parent_stream", u.parentStream);
    j.field("how", u.how);
    j.endObject();
  }
  j.endArray();
  j.field("determinism", conc.caveat());
  j.endObject();
  if (ranks.distributed()) {
    j.key("distributed").beginObject();
    j.field("world_size", ranks.worldSize);
    j.field("local_world_size", ranks.localWorldSize);  // 0: unknown (ranks started by hand)
    j.key("ranks").beginArray();
    for (const auto& r : ranks.ranks) {
      j.beginObject();
      j.field("rank", r.rank);
      j.field("local_rank", r.localRank);
      j.field("restart", r.restart);
      j.field("stream", r.stream);
      j.field("host", r.host);
      j.field("pid", r.pid);
      j.field("steps", r.steps);
      j.field("collectives", r.collectives);
      j.field("results_kept", r.keptResults);
      j.key("exit_code");
      if (r.exitCode)
        j.value(*r.exitCode);
      else
        j.null();
      j.key("failure");
      if (r.failure)
        j.value(formatFailure(*r.failure));
      else
        j.null();
      j.field("received_nonfinite", r.failureReceived);
      j.endObject();
    }
    j.endArray();
    j.key("nonfinite_origin");
    if (ranks.origin) {
      j.beginObject();
      j.field("rank", ranks.origin->rank);
      j.field("step", ranks.origin->failure.step);
      j.field("where", ranks.origin->failure.where);
      j.key("reached").beginArray();
      for (int r : ranks.origin->reached) j.value(r);
      j.endArray();
      j.field("via", ranks.origin->via);
      j.field("via_step", ranks.origin->viaStep);
      j.field("summary", formatOrigin(*ranks.origin));
      j.endObject();
    } else {
      j.null();
    }
    j.key("hang");
    if (ranks.hang) {
      const HangFinding& h = *ranks.hang;
      j.beginObject();
      j.field("kind", std::string(h.desync ? "desync" : "hang"));
      j.field("seq", static_cast<int64_t>(h.seq));
      j.field("op", h.op);
      j.field("step", h.step);
      j.key("waiting").beginArray();
      for (int r : h.waiting) j.value(r);
      j.endArray();
      j.key("suspects").beginArray();
      for (int r : h.suspects) j.value(r);
      j.endArray();
      j.field("summary", h.summary);
      j.key("why").beginArray();
      for (const auto& w : h.why) j.value(w);
      j.endArray();
      j.key("wavefront").beginArray();
      for (const auto& w : h.wavefront) j.value(w);
      j.endArray();
      j.endObject();
    } else {
      j.null();
    }
    j.endObject();
  }
  j.endObject();
  buf += '\n';
  out.write(buf);
}

void writeText(Output& out, Trace& trace, const TraceSummary& s, const RankReport& ranks, const Concurrency& conc,
               const std::string& dlrrVersion, const std::vector<SnapshotRow>& snaps,
               const std::vector<std::string>& culprits, const BatchMap& map) {
  out.line("trace       " + printable(trace.path()));
  out.line(
      "format      " + s.formatVersion +
      (dlrrVersion.empty() ? "" : " (written by dlrr " + printable(dlrrVersion) + ")") +
      (s.formatVersion.rfind("2.", 0) == 0 ? "; 2.x: snapshots in bulk files, which dlrr before 2.x cannot read" : ""));
  out.line("command     " + (s.command.empty() ? std::string("(unknown: no launcher stream)") : joinArgv(s.command)));
  if (!s.host.empty() || !s.user.empty())
    out.line("host        " + printable(s.host) + " (user " + printable(s.user) + ")");
  out.line("created     " + formatTime(s.createdNs));
  out.line("exit code   " + (s.exitCode ? std::to_string(*s.exitCode)
                                        : std::string("unknown (still running, or the launcher was killed)")));
  out.line("steps       " + std::to_string(s.steps) + (s.mainStream.empty() ? "" : " (stream " + s.mainStream + ")") +
           (s.untrainedSteps ? ", and " + std::to_string(s.untrainedSteps) +
                                   " untrained (no backward(): a batch drawn with gradients enabled, not counted)"
                             : std::string()));
  if (ranks.origin)  // distributed: where it began, not the first rank it reached
    out.line("failure     first non-finite value: " + printable(formatOrigin(*ranks.origin)));
  else
    out.line("failure     " +
             (s.failure ? printable(formatFailure(*s.failure)) + " [" + s.failure->stream + "]" : std::string("none")));
  for (const auto& c : culprits) out.line("culprit     " + printable(c));
  if (ranks.hang) {
    out.line("hang        " + printable(ranks.hang->summary));
    for (size_t i = 1; i < ranks.hang->why.size(); ++i) out.line("            " + printable(ranks.hang->why[i]));
    for (const auto& w : ranks.hang->wavefront) out.line("wavefront   " + printable(w));
  }
  if (std::string m = missingRingTensors(s); !m.empty()) out.line("tensors     " + m);
  if (std::string m = changedRingTensors(s); !m.empty()) out.line("tensors     " + m);
  if (std::string c = conc.caveat(); !c.empty()) out.line("determinism " + printable(c));
  out.line("size        " + humanBytes(s.fileBytes) + " on disk; " + humanBytes(s.rawBytes) + " raw in " +
           humanBytes(s.bytes) + " stored (" + ratio(s.rawBytes, s.bytes) + ")");
  if (uint64_t bulk = bulkBytesOf(trace))
    out.line("            + " + humanBytes(bulk) + " in bulk files (snapshots of a budgeted trace, dlrecord --budget)");
  if (map.byReference)
    out.line("replay      " + map.describe() + " (" + std::to_string(map.byReference) + " batches by reference, " +
             std::to_string(map.bytesMissing) + " without their bytes)");
  if (!snaps.empty()) {
    uint64_t raw = 0, fresh = 0;
    for (const auto& sn : snaps) raw += sn.tensorBytes, fresh += sn.newBytes;
    size_t dropped = 0;
    for (const auto& sn : snaps) dropped += sn.dropped;
    out.line("snapshots   " + std::to_string(snaps.size()) + " (jump replay: dlreplay --from); tensors " +
             humanBytes(raw) + ", " + humanBytes(fresh) + " new after dedup" +
             (dropped ? "; " + std::to_string(dropped) +
                            " dropped for the budget (dlrecord --budget): they start no "
                            "replay"
                      : ""));
    out.line("  " + pad("STEP", 10) + pad("REASON", 10) + pad("TENSORS", 12) + "NEW");
    const size_t shown = 20;  // the first and the last ones
    for (size_t i = 0; i < snaps.size(); ++i) {
      if (snaps.size() > shown && i == shown / 2) out.line("  ... " + std::to_string(snaps.size() - shown) + " more");
      if (snaps.size() > shown && i >= shown / 2 && i < snaps.size() - shown / 2) continue;
      const auto& sn = snaps[i];
      out.line("  " + pad(std::to_string(sn.step), 10) + pad(sn.failure ? "failure" : "periodic", 10) +
               pad(humanBytes(sn.tensorBytes), 12) + humanBytes(sn.newBytes) + (sn.dropped ? "  (dropped)" : ""));
    }
  }
  out.line("processes");
  out.line("  " + pad("STREAM", 12) + pad("ROLE", 9) + pad("PID", 8) + pad("EVENTS", 9) + pad("STEPS", 7) +
           pad("EXIT", 6) + pad("STATE", 9) + "ARGV");
  for (const auto& p : s.processes) {
    std::string state = p.torn ? "torn" : !p.damage.empty() ? "damaged" : p.cleanClose ? "clean" : "unclosed";
    out.line("  " + pad(p.name, 12) + pad(p.role, 9) + pad(std::to_string(p.pid), 8) +
             pad(std::to_string(p.events), 9) + pad(std::to_string(p.steps), 7) +
             pad(p.exitCode ? std::to_string(*p.exitCode) : "-", 6) + pad(state, 9) +
             joinArgv(p.argv.empty() && p.role == "launcher" ? s.command : p.argv));  // dlrecord runs the command
    if (!p.damage.empty()) out.line(std::string(p.torn ? "      torn tail: " : "      damage: ") + printable(p.damage));
  }
  for (const auto& b : s.broken) out.line("  " + pad(b.name, 12) + "unreadable: " + printable(b.message));
  if (ranks.distributed()) {
    out.line("ranks (world size " + std::to_string(ranks.worldSize) + ")" +
             (ranks.spansMachines() ? "; this trace holds this machine's " + std::to_string(ranks.ranksHere()) +
                                          ", the others were recorded on other machines (replay: every machine's "
                                          "dlreplay at once, --net host)"
                                    : std::string()));
    out.line("  " + pad("RANK", 6) + pad("STREAM", 16) + pad("HOST", 12) + pad("STEPS", 7) + pad("COLL", 6) +
             pad("KEPT", 6) + pad("EXIT", 6) + "FAILURE");
    for (const auto& r : ranks.ranks) {
      std::string f = r.failure ? printable(formatFailure(*r.failure)) : "none";
      if (r.failureReceived) f += " (received through " + collectiveDisplayName(r.receivedOp) + ")";
      out.line("  " + pad(std::to_string(r.rank) + (r.restart ? "." + std::to_string(r.restart) : ""), 6) +
               pad(r.stream, 16) + pad(printable(r.host), 12) + pad(std::to_string(r.steps), 7) +
               pad(std::to_string(r.collectives), 6) + pad(std::to_string(r.keptResults), 6) +
               pad(r.exitCode ? std::to_string(*r.exitCode) : "-", 6) + f);
    }
  }
  if (!s.notes.empty()) {
    out.line("recorder notes");
    for (const auto& n : s.notes) out.line("  " + printable(n));
  }
}

int run(const Args& args, Output& out) {
  auto trace = openTraceForTool(args.trace(), false);
  TraceSummary s = trace->summarize();
  std::string dlrrVersion;
  if (StreamReader* l = trace->launcher()) dlrrVersion = l->header().getDlrrVersion().cStr();
  RankReport ranks = analyzeRanks(*trace);
  Concurrency conc = analyzeConcurrency(*trace);
  std::vector<SnapshotRow> snaps = snapshotsOf(*trace, s);
  BatchMap map = batchMapOf(*trace, s);
  // The samples of the first non-finite value's batch that held non-finite values: the culprit.
  std::vector<std::string> culprits;
  const FailureInfo* f = ranks.origin ? &ranks.origin->failure : s.failure ? &*s.failure : nullptr;
  if (f && f->kind == "nonfinite" && f->step >= 0)
    if (StreamReader* r = trace->find(f->stream)) {
      try {
        culprits = triage::nonFiniteSamples(*r, f->step);
      } catch (const TraceError&) {  // best effort: damaged: info still reports the rest
      }
    }
  if (args.has("--json"))
    writeJson(out, *trace, s, ranks, conc, dlrrVersion, snaps, culprits, map);
  else
    writeText(out, *trace, s, ranks, conc, dlrrVersion, snaps, culprits, map);
  return kExitOk;
}

}  // namespace

CommandDef infoCommand() {
  return {"info",
          "what a trace holds: command, processes, steps, size, failure",
          "dltrace info TRACE [--json]",
          "Summarises a trace: the recorded command, host and user, when it was made, the trace\n"
          "format version, each process (stream, role, pid, argv, clean/unclosed/torn/damaged, events,\n"
          "steps, exit code), completed steps, sizes and compression ratio, recorder notes and the\n"
          "first failure. Damaged or unreadable streams are reported, not fatal.\n"
          "\n"
          "  --json   one JSON object (keys: format_version, command, exit_code, steps, failure,\n"
          "           processes, bytes, notes, ...; see docs/cli.md)\n",
          {{"--json", OptSpec::Type::Flag}},
          run};
}

}  // namespace dlrr::tools
