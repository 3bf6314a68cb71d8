// dltrace steps: one line per completed step (loss, non-finite count, batch bytes, digests).
#include <optional>

#include "format/Trace.h"
#include "tools/common/Json.h"
#include "tools/common/Text.h"
#include "tools/dltrace/Commands.h"

namespace dlrr::tools {
namespace {

std::string pad(const std::string& s, size_t w) { return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' '); }

int run(const Args& args, Output& out) {
  auto trace = openTraceForTool(args.trace());
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
  try {
    trace->forEachStep(s, [&](const StepInfo& si) {
      if (json) {
        j.beginObject();
        j.field("step", si.step);
        j.field("loss", si.loss);
        j.field("non_finite", si.nonFinite);
        j.field("batch_bytes", si.batchBytes);
        j.field("digests", static_cast<uint64_t>(si.digests));
        j.field("digest_events", si.digestEvents);
        j.field("fingerprint", hex64(si.digestFingerprint));
        j.endObject();
        out.write(buf);
        buf.clear();
      } else {
        out.line(pad(std::to_string(si.step), 8) + pad(formatDouble(si.loss), 24) +
                 pad(std::to_string(si.nonFinite), 10) + pad(humanBytes(si.batchBytes), 12) +
                 pad(std::to_string(si.digests), 8) + (si.digestEvents ? hex64(si.digestFingerprint) : "-"));
      }
    });
  } catch (const TraceError& e) {
    if (!json) throw;
    error = e;  // close the JSON document so that what was read stays usable
  }
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
          "order: step number, loss (nan when none was seen), non-finite values seen in the\n"
          "step's digests, bytes of the step's batches, number of digests, and a fingerprint\n"
          "(XXH3-64 over the step's digest hashes): equal fingerprints mean bit-identical\n"
          "recorded tensors.\n"
          "\n"
          "  --stream NAME   another stream (see `dltrace info`), e.g. p1234\n"
          "  --json          one JSON object {stream, steps: [...], error}\n",
          {{"--stream", OptSpec::Type::Value}, {"--json", OptSpec::Type::Flag}},
          run};
}

}  // namespace dlrr::tools
