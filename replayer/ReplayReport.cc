#include "replayer/ReplayReport.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "schema/report.capnp.h"

namespace dlrr {
namespace {

using Stop = ReplayReport::Stop;
using SStop = schema::ReplayReport::Stop;

// The stops, their names and their schema values, in one table.
struct StopEntry {
  Stop stop;
  SStop wire;
  const char* name;
};
constexpr StopEntry kStops[] = {
    {Stop::Running, SStop::RUNNING, "running"},
    {Stop::Exit, SStop::EXIT, "exit"},
    {Stop::Target, SStop::TARGET, "target"},
    {Stop::EndOfRecording, SStop::END_OF_RECORDING, "end-of-recording"},
    {Stop::Divergence, SStop::DIVERGENCE, "divergence"},
    {Stop::Unservable, SStop::UNSERVABLE, "unservable"},
    {Stop::Stop, SStop::STOP, "stop"},
};

const StopEntry& stopEntry(Stop s) {
  for (const auto& e : kStops)
    if (e.stop == s) return e;
  return kStops[std::size(kStops) - 1];
}

// A fact said twice keeps both, one a line (as a repeated key of the text report did).
void appendLine(std::optional<std::string>& field, const std::string& value) {
  if (field)
    *field += "\n" + value;
  else
    field = value;
}

std::string joinLines(const std::vector<std::string>& values) {
  std::string out;
  for (const auto& v : values) out += (out.empty() ? "" : "\n") + v;
  return out;
}

// The hook's facts (dlrr_replay_fact keys), each with its field: the one place these names live
// (reportEntries writes them back under the same names).
struct HookText {
  const char* key;
  std::optional<std::string> ReplayReport::*field;
};
constexpr HookText kHookTexts[] = {
    {"stop.step", &ReplayReport::stopStep},
    {"stop.where", &ReplayReport::stopWhere},
    {"backward.function", &ReplayReport::backwardFunction},
    {"backward.forward_line", &ReplayReport::backwardForwardLine},
    {"env.threads", &ReplayReport::envThreads},
    {"gpu.capture_status", &ReplayReport::gpuCaptureStatus},
    {"jump.restored", &ReplayReport::jumpRestored},
    {"exception", &ReplayReport::exception},
    {"exception.where", &ReplayReport::exceptionWhere},
    {"dist.group", &ReplayReport::distGroup},
    {"dist.comm_hook", &ReplayReport::distCommHook},
    {"explain.op", &ReplayReport::explainOp},
    {"explain.line", &ReplayReport::explainLine},
    {"explain.inputs", &ReplayReport::explainInputs},
    {"explain.cause", &ReplayReport::explainCause},
    {"explain.history", &ReplayReport::explainHistory},
    {"whatif.change", &ReplayReport::whatIfChange},
    {"whatif.verdict", &ReplayReport::whatIfVerdict},
    {"whatif.losses", &ReplayReport::whatIfLosses},
};
struct HookList {
  const char* key;
  std::vector<std::string> ReplayReport::*field;
};
constexpr HookList kHookLists[] = {
    {"batch.samples", &ReplayReport::batchSamples},
    {"verify.unverified", &ReplayReport::unverified},
    {"warning", &ReplayReport::warnings},
};

std::string str(capnp::Text::Reader t) { return std::string(t.cStr(), t.size()); }

std::optional<std::string> text(bool has, capnp::Text::Reader t) {
  if (!has) return std::nullopt;
  return str(t);
}

void setText(const std::optional<std::string>& v, auto&& set) {
  if (v) set(kj::StringPtr(v->c_str(), v->size()));
}

template <class Builder>
void setList(Builder&& init, const std::vector<std::string>& values) {
  if (values.empty()) return;
  auto l = init(static_cast<unsigned>(values.size()));
  for (unsigned i = 0; i < values.size(); ++i) l.set(i, kj::StringPtr(values[i].c_str(), values[i].size()));
}

std::vector<std::string> list(capnp::List<capnp::Text>::Reader l) {
  std::vector<std::string> out;
  for (auto t : l) out.push_back(str(t));
  return out;
}

}  // namespace

const char* stopName(Stop s) { return stopEntry(s).name; }

Stop parseStop(std::string_view reason) {
  for (const auto& e : kStops)
    if (reason == e.name) return e.stop;
  return Stop::Stop;
}

bool addHookFact(ReplayReport& r, std::string_view key, const std::string& value) {
  for (const auto& h : kHookTexts)
    if (key == h.key) {
      appendLine(r.*h.field, value);
      return true;
    }
  for (const auto& h : kHookLists)
    if (key == h.key) {
      (r.*h.field).push_back(value);
      return true;
    }
  return false;
}

std::string collectivesText(const ReplayReport::Dist& d) {
  return std::to_string(d.issued) + " of " + std::to_string(d.recorded) + " recorded issued; " +
         std::to_string(d.tensorsVerified) + " tensors verified; " + std::to_string(d.resultsServed) +
         " results served";
}

// The entries reportEntries writes with std::to_string, and the hook's step.
constexpr std::string_view kIntegerEntries[] = {
    "target.step",
    "verified_steps",
    "recorded_steps",
    "last_step",
    "jump.step",
    "divergence.step",
    "launch.steps_checked",
    "launch.steps_matched",
    "launch.divergence.step",
    "launch.divergence.position",
    "digests.incomparable",
    "dist.rank",
    "stop.step",
};

bool isIntegerEntry(std::string_view key) {
  for (auto k : kIntegerEntries)
    if (k == key) return true;
  return false;
}

std::map<std::string, std::string> reportEntries(const ReplayReport& r) {
  std::map<std::string, std::string> e;
  if (!r.attached) return e;
  e["stop"] = stopName(r.stop);
  e["target"] = r.target;
  e["target.step"] = std::to_string(r.targetStep);
  e["target.where"] = r.targetWhere;
  e["verified_steps"] = std::to_string(r.verifiedSteps);
  e["recorded_steps"] = std::to_string(r.recordedSteps);
  e["last_step"] = std::to_string(r.lastStep);
  if (r.jumpStep) e["jump.step"] = std::to_string(*r.jumpStep);
  if (const auto& d = r.divergence) {
    e["divergence.step"] = std::to_string(d->step);
    e["divergence.kind"] = d->kind;
    e["divergence.path"] = d->path;
    e["divergence.detail"] = d->detail;
  }
  if (r.gpuCapture) e["gpu.capture"] = *r.gpuCapture;
  if (r.gpuRecorded) e["gpu.recorded"] = *r.gpuRecorded;
  if (const auto& l = r.launches) {
    e["launch.steps_checked"] = std::to_string(l->stepsChecked);
    e["launch.steps_matched"] = std::to_string(l->stepsMatched);
  }
  if (const auto& d = r.launchDivergence) {
    e["launch.divergence.step"] = std::to_string(d->step);
    e["launch.divergence.position"] = std::to_string(d->position);
    e["launch.divergence.detail"] = d->detail;
  }
  if (r.launchAtStop) e["launch.at_stop"] = *r.launchAtStop;
  if (r.incomparableDigests) e["digests.incomparable"] = std::to_string(r.incomparableDigests);
  if (const auto& d = r.dist) {
    e["dist.rank"] = std::to_string(d->rank);
    e["dist.collectives"] = collectivesText(*d);
  }
  for (const auto& h : kHookTexts)
    if (const auto& v = r.*h.field) e[h.key] = *v;
  for (const auto& h : kHookLists)
    if (!(r.*h.field).empty()) e[h.key] = joinLines(r.*h.field);
  return e;
}

std::string encodeReplayReport(const ReplayReport& r) {
  capnp::MallocMessageBuilder msg;
  auto b = msg.initRoot<schema::ReplayReport>();
  b.setStop(stopEntry(r.stop).wire);
  b.setTarget(r.target);
  b.setTargetStep(r.targetStep);
  b.setTargetWhere(r.targetWhere);
  b.setVerifiedSteps(r.verifiedSteps);
  b.setRecordedSteps(r.recordedSteps);
  b.setLastStep(r.lastStep);
  b.setJumpStep(r.jumpStep.value_or(-1));
  if (const auto& d = r.divergence) {
    auto o = b.initDivergence();
    o.setStep(d->step);
    o.setKind(d->kind);
    o.setPath(d->path);
    o.setDetail(d->detail);
  }
  if (r.gpuCapture || r.gpuRecorded || r.launches || r.launchDivergence || r.launchAtStop || r.incomparableDigests) {
    auto g = b.initGpu();
    setText(r.gpuCapture, [&](kj::StringPtr s) { g.setCapture(s); });
    setText(r.gpuRecorded, [&](kj::StringPtr s) { g.setRecorded(s); });
    if (const auto& l = r.launches) {
      auto o = g.initLaunches();
      o.setStepsChecked(l->stepsChecked);
      o.setStepsMatched(l->stepsMatched);
    }
    if (const auto& d = r.launchDivergence) {
      auto o = g.initLaunchDivergence();
      o.setStep(d->step);
      o.setPosition(d->position);
      o.setDetail(d->detail);
    }
    setText(r.launchAtStop, [&](kj::StringPtr s) { g.setLaunchAtStop(s); });
    g.setIncomparableDigests(r.incomparableDigests);
  }
  if (const auto& d = r.dist) {
    auto o = b.initDist();
    o.setRank(d->rank);
    o.setIssued(d->issued);
    o.setRecorded(d->recorded);
    o.setTensorsVerified(d->tensorsVerified);
    o.setResultsServed(d->resultsServed);
  }
  auto h = b.initHook();
  setText(r.stopStep, [&](kj::StringPtr s) { h.setStopStep(s); });
  setText(r.stopWhere, [&](kj::StringPtr s) { h.setStopWhere(s); });
  setList([&](unsigned n) { return h.initBatchSamples(n); }, r.batchSamples);
  setText(r.backwardFunction, [&](kj::StringPtr s) { h.setBackwardFunction(s); });
  setText(r.backwardForwardLine, [&](kj::StringPtr s) { h.setBackwardForwardLine(s); });
  setText(r.envThreads, [&](kj::StringPtr s) { h.setEnvThreads(s); });
  setText(r.gpuCaptureStatus, [&](kj::StringPtr s) { h.setGpuCaptureStatus(s); });
  setText(r.jumpRestored, [&](kj::StringPtr s) { h.setJumpRestored(s); });
  setList([&](unsigned n) { return h.initUnverified(n); }, r.unverified);
  setText(r.exception, [&](kj::StringPtr s) { h.setException(s); });
  setText(r.exceptionWhere, [&](kj::StringPtr s) { h.setExceptionWhere(s); });
  setText(r.distGroup, [&](kj::StringPtr s) { h.setDistGroup(s); });
  setText(r.distCommHook, [&](kj::StringPtr s) { h.setDistCommHook(s); });
  setText(r.explainOp, [&](kj::StringPtr s) { h.setExplainOp(s); });
  setText(r.explainLine, [&](kj::StringPtr s) { h.setExplainLine(s); });
  setText(r.explainInputs, [&](kj::StringPtr s) { h.setExplainInputs(s); });
  setText(r.explainCause, [&](kj::StringPtr s) { h.setExplainCause(s); });
  setText(r.explainHistory, [&](kj::StringPtr s) { h.setExplainHistory(s); });
  setText(r.whatIfChange, [&](kj::StringPtr s) { h.setWhatIfChange(s); });
  setText(r.whatIfVerdict, [&](kj::StringPtr s) { h.setWhatIfVerdict(s); });
  setText(r.whatIfLosses, [&](kj::StringPtr s) { h.setWhatIfLosses(s); });
  setList([&](unsigned n) { return b.initWarnings(n); }, r.warnings);
  auto words = capnp::messageToFlatArray(msg);
  auto bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

ReplayReport decodeReplayReport(std::string_view bytes) {
  ReplayReport r;
  if (bytes.empty() || bytes.size() % sizeof(capnp::word) != 0) return r;
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), bytes.data(), bytes.size());
  try {
    capnp::FlatArrayMessageReader msg(words);
    if (msg.getEnd() != words.end()) return r;  // trailing bytes: not one report
    auto m = msg.getRoot<schema::ReplayReport>();
    ReplayReport o;
    o.stop = Stop::Stop;
    for (const auto& e : kStops)
      if (e.wire == m.getStop()) o.stop = e.stop;
    o.target = str(m.getTarget());
    o.targetStep = m.getTargetStep();
    o.targetWhere = str(m.getTargetWhere());
    o.verifiedSteps = m.getVerifiedSteps();
    o.recordedSteps = m.getRecordedSteps();
    o.lastStep = m.getLastStep();
    if (m.getJumpStep() >= 0) o.jumpStep = m.getJumpStep();
    if (m.hasDivergence()) {
      auto d = m.getDivergence();
      o.divergence = ReplayReport::Divergence{d.getStep(), str(d.getKind()), str(d.getPath()), str(d.getDetail())};
    }
    if (m.hasGpu()) {
      auto g = m.getGpu();
      o.gpuCapture = text(g.hasCapture(), g.getCapture());
      o.gpuRecorded = text(g.hasRecorded(), g.getRecorded());
      if (g.hasLaunches())
        o.launches = ReplayReport::Launches{g.getLaunches().getStepsChecked(), g.getLaunches().getStepsMatched()};
      if (g.hasLaunchDivergence()) {
        auto d = g.getLaunchDivergence();
        o.launchDivergence = ReplayReport::LaunchDivergence{d.getStep(), d.getPosition(), str(d.getDetail())};
      }
      o.launchAtStop = text(g.hasLaunchAtStop(), g.getLaunchAtStop());
      o.incomparableDigests = g.getIncomparableDigests();
    }
    if (m.hasDist()) {
      auto d = m.getDist();
      o.dist =
          ReplayReport::Dist{d.getRank(), d.getIssued(), d.getRecorded(), d.getTensorsVerified(), d.getResultsServed()};
    }
    auto h = m.getHook();
    o.stopStep = text(h.hasStopStep(), h.getStopStep());
    o.stopWhere = text(h.hasStopWhere(), h.getStopWhere());
    o.batchSamples = list(h.getBatchSamples());
    o.backwardFunction = text(h.hasBackwardFunction(), h.getBackwardFunction());
    o.backwardForwardLine = text(h.hasBackwardForwardLine(), h.getBackwardForwardLine());
    o.envThreads = text(h.hasEnvThreads(), h.getEnvThreads());
    o.gpuCaptureStatus = text(h.hasGpuCaptureStatus(), h.getGpuCaptureStatus());
    o.jumpRestored = text(h.hasJumpRestored(), h.getJumpRestored());
    o.unverified = list(h.getUnverified());
    o.exception = text(h.hasException(), h.getException());
    o.exceptionWhere = text(h.hasExceptionWhere(), h.getExceptionWhere());
    o.distGroup = text(h.hasDistGroup(), h.getDistGroup());
    o.distCommHook = text(h.hasDistCommHook(), h.getDistCommHook());
    o.explainOp = text(h.hasExplainOp(), h.getExplainOp());
    o.explainLine = text(h.hasExplainLine(), h.getExplainLine());
    o.explainInputs = text(h.hasExplainInputs(), h.getExplainInputs());
    o.explainCause = text(h.hasExplainCause(), h.getExplainCause());
    o.explainHistory = text(h.hasExplainHistory(), h.getExplainHistory());
    o.whatIfChange = text(h.hasWhatIfChange(), h.getWhatIfChange());
    o.whatIfVerdict = text(h.hasWhatIfVerdict(), h.getWhatIfVerdict());
    o.whatIfLosses = text(h.hasWhatIfLosses(), h.getWhatIfLosses());
    o.warnings = list(m.getWarnings());
    o.attached = true;
    return o;
  } catch (const kj::Exception&) {
    return r;  // not a report
  }
}

bool writeReplayReportFile(const std::string& path, const ReplayReport& r) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;  // not dlreplay's
  const std::string bytes = encodeReplayReport(r);
  // One name per writing thread: a second writer never removes the first one's file.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(::gettid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) {  // left by a killed thread whose ids this one now has
    ::unlink(tmp.c_str());
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  }
  if (fd < 0) return false;
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    done += static_cast<size_t>(w);
  }
  ::close(fd);
  if (done != bytes.size() || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

ReplayReport readReplayReportFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return decodeReplayReport(bytes.str());
}

void removeReplayReportTemporaries(const std::string& path) {
  auto slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  while (dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (name.rfind(base + ".", 0) == 0 && name.find(".tmp.", base.size()) != std::string_view::npos)
      ::unlinkat(::dirfd(d), e->d_name, 0);
  }
  ::closedir(d);
}

}  // namespace dlrr
