// dltrace events: one line per event, optionally only one step (found through the footer's
// step index, without reading the events before it), one stream, some kinds.
#include <cstdio>
#include <set>

#include "format/Trace.h"
#include "tools/common/Json.h"
#include "tools/common/Text.h"
#include "tools/dltrace/Commands.h"
#include "tools/dltrace/EventText.h"
#include "tools/dltrace/OptionValues.h"
#include "tools/dltrace/StepScan.h"

namespace dlrr::tools {
namespace {

std::string seconds(int64_t ns) {
  char b[48];
  std::snprintf(b, sizeof b, "%+.6fs", static_cast<double>(ns) / 1e9);
  return b;
}

InternTable collectNames(StreamReader& s) {
  InternTable names;
  s.forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
    if (e.isInternedString()) names[e.getInternedString().getId()] = e.getInternedString().getText().cStr();
  });
  return names;
}

struct Filter {
  std::optional<int64_t> step;
  std::set<schema::Event::Which> kinds;
  bool json = false;
};

// Prints the events of one stream that pass the filter; returns how many were printed.
uint64_t printStream(StreamReader& s, const Filter& f, Output& out, bool requireStep) {
  uint64_t from = 0;
  if (f.step && *f.step >= 0) {
    auto off = s.stepFrameOffset(*f.step);
    if (!off) {
      if (requireStep)
        throw TraceError(ErrorKind::NotFound, "stream " + s.name() + " has no step " + std::to_string(*f.step));
      return 0;
    }
    bool intact = false;
    for (const auto& fr : s.frames()) intact |= fr.offset == *off;
    if (!intact)
      throw TraceError(ErrorKind::Corrupt, s.name() + ": step " + std::to_string(*f.step) + " lies beyond damage (" +
                                               s.status().damage + ")");
    from = *off;
  }
  warnIfDamaged(s);
  InternTable names;
  bool namesComplete = from == 0;
  uint64_t printed = 0;
  std::string buf;
  std::optional<StepScan> scan;  // the step's events, then its failure-ring tensors written later
  if (f.step) scan.emplace(*f.step);
  s.forEachEventUntil(
      [&](schema::Event::Reader e, const FrameInfo& fr) {
        if (e.isInternedString()) names[e.getInternedString().getId()] = e.getInternedString().getText().cStr();
        if (scan) {
          auto v = (*scan)(e);
          if (v == StepScan::Verdict::Stop) return false;
          if (v == StepScan::Verdict::Skip) return true;
        }
        if (!f.kinds.empty() && !f.kinds.count(e.which())) return true;
        if (e.isCudaLaunch() && !namesComplete && !names.count(e.getCudaLaunch().getNameId())) {
          names = collectNames(s);  // the kernel was named before the step we jumped to
          namesComplete = true;
        }
        buf.clear();
        if (f.json) {
          JsonWriter j(buf, 0);
          j.beginObject();
          j.field("stream", s.name());
          j.field("frame", fr.offset);
          j.field("async", (fr.header.flags & kFrameFlagAsync) != 0);
          j.field("kind", eventKindName(e));
          j.key("event");
          eventJson(j, e);
          j.endObject();
          buf += '\n';
        } else {
          buf = s.name() + " " + (e.getStep() < 0 ? std::string("-") : std::to_string(e.getStep())) + " " +
                seconds(e.getTNs()) + " t" + std::to_string(e.getThread()) + " " + eventKindName(e) + ": " +
                describeEvent(e, names);
          if (fr.header.flags & kFrameFlagAsync) buf += " [written from a signal handler]";
          buf += '\n';
          for (const auto& l : eventDetailLines(e)) buf += l + '\n';
        }
        out.write(buf);
        ++printed;
        return true;
      },
      from);
  return printed;
}

int run(const Args& args, Output& out) {
  Filter f;
  f.step = args.intValue("--step");
  if (f.step && *f.step < 0)  // '-' (before the first step) is not a step one can ask for
    throw UsageError("--step must be a step number, 0 or more (got " + std::to_string(*f.step) + ")");
  if (auto k = args.value("--kind")) f.kinds = parseEventKinds(*k);
  f.json = args.has("--json");
  auto trace = openTraceForTool(args.trace());
  auto streamName = args.value("--stream");
  if (streamName) {
    printStream(selectStream(*trace, streamName), f, out, true);
    return kExitOk;
  }
  bool anyHasStep = !f.step || *f.step < 0;
  for (auto& s : trace->streams()) {
    if (f.step && *f.step >= 0 && !s->stepFrameOffset(*f.step)) continue;
    anyHasStep = true;
    printStream(*s, f, out, false);
  }
  if (!anyHasStep)
    throw TraceError(ErrorKind::NotFound, "no stream of " + trace->path() + " has step " + std::to_string(*f.step));
  return kExitOk;
}

}  // namespace

CommandDef eventsCommand() {
  return {"events",
          "one line per event (batches, RNG states, entropy, digests, failures, ...)",
          "dltrace events TRACE [--step N] [--stream NAME] [--kind K[,K...]] [--json]",
          "Prints events in recording order, one line each:\n"
          "  STREAM STEP TIME THREAD KIND: details\n"
          "STEP is '-' before the first step; TIME is seconds since the stream started. Batches\n"
          "show their structure with dtypes and shapes, entropy its byte count and a hex prefix,\n"
          "failures their message and stacks on indented lines.\n"
          "\n"
          "  --step N        only step N (jumps there through the stream's step index); the\n"
          "                  failure ring's tensors of step N, written later (during the\n"
          "                  failing step), follow its other events\n"
          "  --stream NAME   only this stream (default: all streams)\n"
          "  --kind K,...    only these kinds: note, processStart, fork, processExit, entropy,\n"
          "                  rngState, batch, stepBegin, stepEnd, loss, digest, tensor,\n"
          "                  cudaLaunch, cudaMemcpy, failure, runtimeInfo, internedString,\n"
          "                  loaderEnd, recorderStatus (case and '-'/'_' ignored)\n"
          "  --json          JSON Lines: {stream, frame, async, kind, event} per event, where\n"
          "                  event mirrors schema/dlrr.capnp field by field\n",
          {{"--step", OptSpec::Type::Value},
           {"--stream", OptSpec::Type::Value},
           {"--kind", OptSpec::Type::Value},
           {"--json", OptSpec::Type::Flag}},
          run};
}

}  // namespace dlrr::tools
