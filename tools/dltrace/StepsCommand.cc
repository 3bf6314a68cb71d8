// dltrace steps: one line per completed step (loss, non-finite count, batch bytes, digests).
#include <map>
#include <optional>
#include <vector>

#include "format/Trace.h"
#include "tools/common/Json.h"
#include "tools/common/Text.h"
#include "tools/dltrace/Commands.h"
#include "triage/Ranks.h"

namespace dlrr::tools {
namespace {

std::string pad(const std::string& s, size_t w) { return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' '); }

// A distributed trace without --stream: the ranks side by side, one row per step, so that
// where ranks part ways (a loss going non-finite on one rank first) shows at a glance.
int runRanks(Trace& trace, const RankReport& ranks, bool json, Output& out) {
  std::vector<std::vector<StepInfo>> perRank;
  std::map<int64_t, bool> stepNumbers;
  for (const auto& r : ranks.ranks) {
    std::vector<StepInfo> steps;
    if (StreamReader* s = trace.find(r.stream)) {
      warnIfDamaged(*s);
      try {
        trace.forEachStep(*s, [&](const StepInfo& si) { steps.push_back(si); });
      } catch (const TraceError&) {  // best effort: damaged: the steps before the damage
      }
    }
    for (const auto& si : steps) stepNumbers[si.step] = true;
    perRank.push_back(std::move(steps));
  }
  if (json) {
    std::string buf;
    JsonWriter j(buf, 0);
    j.beginObject();
    j.field("stream", trace.mainStream() ? trace.mainStream()->name() : std::string());
    j.key("steps").beginArray();
    if (StreamReader* m = trace.mainStream())
      for (size_t i = 0; i < ranks.ranks.size(); ++i)
        if (ranks.ranks[i].stream == m->name())
          for (const auto& si : perRank[i]) {
            j.beginObject();
            j.field("step", si.step);
            j.field("loss", si.loss);
            j.field("non_finite", si.nonFinite);
            j.endObject();
          }
    j.endArray();
    j.key("ranks").beginArray();
    for (size_t i = 0; i < ranks.ranks.size(); ++i) {
      j.beginObject();
      j.field("rank", ranks.ranks[i].rank);
      j.field("stream", ranks.ranks[i].stream);
      j.key("steps").beginArray();
      for (const auto& si : perRank[i]) {
        j.beginObject();
        j.field("step", si.step);
        j.field("loss", si.loss);
        j.field("non_finite", si.nonFinite);
        j.field("fingerprint", hex64(si.digestFingerprint));
        j.endObject();
      }
      j.endArray();
      j.endObject();
    }
    j.endArray();
    j.key("error").null();
    j.endObject();
    buf += '\n';
    out.write(buf);
    return kExitOk;
  }
  std::string head = pad("STEP", 8);
  for (const auto& r : ranks.ranks) head += pad("RANK " + std::to_string(r.rank) + " LOSS", 22) + pad("NONFIN", 8);
  out.line(head);
  for (const auto& [step, _] : stepNumbers) {
    std::string line = pad(std::to_string(step), 8);
    for (const auto& steps : perRank) {
      const StepInfo* si = nullptr;
      for (const auto& x : steps)
        if (x.step == step) si = &x;
      line += si ? pad(formatDouble(si->loss), 22) + pad(std::to_string(si->nonFinite), 8) : pad("-", 22) + pad("-", 8);
    }
    out.line(line);
  }
  if (ranks.origin) out.line("first non-finite value: " + printable(formatOrigin(*ranks.origin)));
  return kExitOk;
}

int run(const Args& args, Output& out) {
  auto trace = openTraceForTool(args.trace());
  if (!args.value("--stream")) {
    RankReport ranks = analyzeRanks(*trace);
    if (ranks.distributed()) return runRanks(*trace, ranks, args.has("--json"), out);
  }
  StreamReader& s = selectStream(*trace, args.value("--stream"));
  warnIfDamaged(s);
  const bool json = args.has("--json");
  std::string buf;
  JsonWriter j(buf, 0);
  if (json) {
    j.beginObject();
    j.field("stream", s.name());
    j.key("steps").beginArray();
  } else {
    out.line(pad("STEP", 8) + pad("LOSS", 24) + pad("NONFINITE", 10) + pad("BATCH", 12) + pad("DIGESTS", 8) +
             "FINGERPRINT");
  }
  std::optional<TraceError> error;
  uint64_t untrained = 0;
  try {
    trace->forEachStep(s, [&](const StepInfo& si) {
      if (json) {
        j.beginObject();
        j.field("step", si.step);
        j.key("loss");
        if (si.untrained)
          j.null();  // no loss was recorded
        else
          j.value(si.loss);
        j.field("untrained", si.untrained);
        j.field("non_finite", si.nonFinite);
        j.field("batch_bytes", si.batchBytes);
        j.field("digests", static_cast<uint64_t>(si.digests));
        j.field("digest_events", si.digestEvents);
        j.field("fingerprint", hex64(si.digestFingerprint));
        j.endObject();
        out.write(buf);
        buf.clear();
      } else {
        untrained += si.untrained;
        out.line(pad(std::to_string(si.step), 8) + pad(si.untrained ? "-" : formatDouble(si.loss), 24) +
                 pad(std::to_string(si.nonFinite), 10) + pad(humanBytes(si.batchBytes), 12) +
                 pad(std::to_string(si.digests), 8) + (si.digestEvents ? hex64(si.digestFingerprint) : "-"));
      }
    });
  } catch (const TraceError& e) {
    if (!json) throw;
    error = e;  // close the JSON document so that what was read stays usable
  }
  if (!json && untrained)
    out.line(
        "-: no loss recorded; no backward() nor optimizer.step() ran in the step (a batch drawn with "
        "gradients enabled, e.g. evaluation): not a training step");
  if (json) {
    j.endArray();
    j.key("error");
    if (error)
      j.value(std::string(error->what()));
    else
      j.null();
    j.endObject();
    buf += '\n';
    out.write(buf);
    if (error) throw *error;
  }
  return kExitOk;
}

}  // namespace

CommandDef stepsCommand() {
  return {"steps",
          "one line per completed step: loss, non-finite count, batch bytes, digests",
          "dltrace steps TRACE [--stream NAME] [--json]",
          "Lists the completed steps of one stream (default: the main training process), in\n"
          "order: step number, loss (- when no backward() ran in the step: not a training\n"
          "step; nan when the loss was NaN or not a scalar), non-finite values seen in the\n"
          "step's digests, bytes of the step's batches, number of digests, and a fingerprint\n"
          "(XXH3-64 over the step's digest hashes): equal fingerprints mean bit-identical\n"
          "recorded tensors.\n"
          "\n"
          "A distributed trace (one stream per rank) lists every rank side by side: each step's\n"
          "loss and non-finite count per rank, then the rank where the first non-finite value\n"
          "appeared; --stream rankN shows one rank in full.\n"
          "\n"
          "  --stream NAME   another stream (see `dltrace info`), e.g. p1234 or rank1\n"
          "  --json          one JSON object {stream, steps: [...], error}; distributed traces\n"
          "                  add ranks: [{rank, stream, steps: [...]}]\n",
          {{"--stream", OptSpec::Type::Value}, {"--json", OptSpec::Type::Flag}},
          run};
}

}  // namespace dlrr::tools
