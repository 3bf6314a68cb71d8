// dltrace verify: checks every checksum and content hash of every stream and says what is
// still readable. Exit 0 only when every stream is intact.
#include "format/StreamReader.h"
#include "format/TraceDir.h"
#include "format/TraceError.h"
#include "tools/common/Text.h"
#include "tools/dltrace/Commands.h"

namespace dlrr::tools {
namespace {

void collectBlobRefs(schema::Value::Reader v, std::vector<schema::BlobRef::Reader>& out) {
  switch (v.which()) {
    case schema::Value::TENSOR:
      out.push_back(v.getTensor().getData());
      return;
    case schema::Value::LIST:
      for (auto c : v.getList()) collectBlobRefs(c, out);
      return;
    case schema::Value::TUPLE:
      for (auto c : v.getTuple()) collectBlobRefs(c, out);
      return;
    case schema::Value::DICT:
      for (auto c : v.getDict()) collectBlobRefs(c.getValue(), out);
      return;
    default:
      return;
  }
}

std::string withoutName(const std::string& problem, const std::string& name) {
  std::string prefix = name + ": ";
  return problem.rfind(prefix, 0) == 0 ? problem.substr(prefix.size()) : problem;
}

// Verifies one stream and prints its report; returns true when intact (a recovered stream,
// whose writer stopped without closing it, is intact: see StreamStatus::torn).
bool verifyStream(StreamReader& s, Output& out) {
  std::vector<std::string> problems = s.verify();
  uint64_t steps = 0;
  uint64_t missingBlobs = 0;
  int64_t firstMissingStep = 0;
  try {
    std::vector<schema::BlobRef::Reader> refs;
    s.forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
      if (e.isStepEnd()) ++steps;
      refs.clear();
      if (e.isRngState()) refs.push_back(e.getRngState().getState());
      if (e.isBatch()) collectBlobRefs(e.getBatch().getValue(), refs);
      if (e.isTensor()) refs.push_back(e.getTensor().getTensor().getData());
      for (auto r : refs) {
        if (s.hasBlob(Hash128{r.getHashLo(), r.getHashHi()})) continue;
        if (missingBlobs++ == 0) firstMissingStep = e.getStep();
      }
    });
  } catch (const TraceError& e) {  // verify() has listed it already; keep counting up to it
    bool listed = false;
    for (const auto& p : problems) listed |= p == e.what();
    if (!listed) problems.push_back(e.what());
  }
  if (missingBlobs)
    problems.push_back(std::to_string(missingBlobs) + " referenced blob(s) missing (first in step " +
                       std::to_string(firstMissingStep) + ")");
  const StreamStatus& st = s.status();
  if (problems.empty()) {
    std::string how =
        st.cleanClose ? "closed cleanly"
        : st.torn     ? "recovered: its writer stopped mid-write; " + printable(st.damage) + " holds nothing committed"
                      : "not closed: its writer stopped after its last commit";
    out.line(s.name() + ": ok (" + std::to_string(steps) + " steps, " + std::to_string(s.frames().size()) +
             " frames, " + how + ")");
    return true;
  }
  std::string readable = st.cleanClose
                             ? std::to_string(steps) + " of " + std::to_string(st.footerSteps) + " steps readable"
                             : std::to_string(steps) + " steps readable";
  out.line(s.name() + ": " + printable(withoutName(problems.front(), s.name())) + "; " + readable);
  for (size_t i = 1; i < problems.size(); ++i) out.line("  also: " + printable(withoutName(problems[i], s.name())));
  return false;
}

int run(const Args& args, Output& out) {
  const std::string& path = args.trace();
  UniqueFd dir = openTraceDir(path);
  auto names = listStreams(dir.get());
  if (names.empty()) throw TraceError(ErrorKind::NotATrace, path + " holds no dlrr streams (*.dls): not a trace");
  size_t damaged = 0;
  size_t notStreams = 0;
  size_t opened = 0;
  size_t torn = 0;
  for (const auto& name : names) {
    std::unique_ptr<StreamReader> s;
    try {
      s = StreamReader::open(dir.get(), name + kStreamExt, name);
    } catch (const TraceError& e) {
      if (e.kind() == ErrorKind::FutureVersion) throw;  // nothing this dlrr can check
      if (e.kind() == ErrorKind::Io) throw;
      if (e.torn()) {  // its writer was stopped while creating it: nothing was recorded in it
        out.line(name + ": ok (0 steps, recovered: " + printable(e.what()) + ")");
        ++torn;
        continue;
      }
      out.line(name + ": unreadable: " + printable(e.what()) + "; 0 steps readable");
      ++damaged;
      notStreams += e.kind() == ErrorKind::NotATrace;
      continue;
    }
    ++opened;
    if (!verifyStream(*s, out)) ++damaged;
  }
  if (notStreams == names.size()) throw TraceError(ErrorKind::NotATrace, path + " holds no readable dlrr stream");
  if (opened == 0 && torn == 0) throw TraceError(ErrorKind::Corrupt, "verify: no stream of " + path + " can be read");
  if (damaged == 0) {
    out.line("verify: " + std::to_string(names.size()) + " stream(s) intact");
    return kExitOk;
  }
  out.line("verify: " + std::to_string(damaged) + " of " + std::to_string(names.size()) + " stream(s) damaged");
  return kExitNegative;
}

}  // namespace

CommandDef verifyCommand() {
  return {"verify",
          "check every checksum and content hash; exit 1 when anything is damaged",
          "dltrace verify TRACE",
          "Reads every frame of every stream: frame header and payload CRC32C, decompression,\n"
          "that every event parses, every blob's XXH3-128 content hash, and that every blob an\n"
          "event references is present. Prints one line per stream: 'ok', or what is damaged\n"
          "and how many steps are still readable. Exit 0 when every stream is intact, including\n"
          "recovered streams: a stream whose writer was stopped (kill -9, full disk) has no footer\n"
          "and may end in a torn frame or be cut short at its start, which holds nothing committed.\n"
          "Exit 1 when anything is damaged (bytes that are wrong, not merely missing at the end);\n"
          "6 when no stream can be read at all.\n",
          {},
          run};
}

}  // namespace dlrr::tools
