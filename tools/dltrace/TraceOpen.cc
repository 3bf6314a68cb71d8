#include "format/TraceError.h"
#include "tools/dltrace/Commands.h"

namespace dlrr::tools {

std::unique_ptr<Trace> openTraceForTool(const std::string& path, bool warnBroken) {
  auto t = Trace::open(path, OpenMode::Tolerant);
  if (warnBroken)
    for (const auto& b : t->broken()) warn(b.name + " skipped: " + b.message);
  return t;
}

StreamReader& selectStream(Trace& trace, const std::optional<std::string>& name) {
  if (name) {
    std::string want = *name;
    if (want.size() > 4 && want.compare(want.size() - 4, 4, ".dls") == 0) want.resize(want.size() - 4);
    if (StreamReader* s = trace.find(want)) return *s;
    std::string have;
    for (auto& s : trace.streams()) have += (have.empty() ? "" : ", ") + s->name();
    for (const auto& b : trace.broken())
      if (b.name == want) throw TraceError(b.kind, "stream " + want + " cannot be read: " + b.message);
    throw TraceError(ErrorKind::NotFound,
                     "no stream named '" + *name + "' in " + trace.path() + " (streams: " + have + ")");
  }
  if (StreamReader* s = trace.mainStream()) return *s;
  if (StreamReader* s = trace.launcher()) return *s;
  throw TraceError(ErrorKind::NotFound, trace.path() + " has no readable stream");
}

void warnIfDamaged(StreamReader& s) {
  s.frames();  // the scan that finds damage
  if (!s.status().damage.empty()) warn(s.name() + ": " + s.status().damage + "; showing what precedes it");
}

}  // namespace dlrr::tools
