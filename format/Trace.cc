#include "format/Trace.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <utility>

#include "format/Hash.h"
#include "format/TraceDir.h"
#include "format/TraceError.h"

namespace dlrr {
namespace {

const char* failureKindName(schema::Failure::Kind k) {
  switch (k) {
    case schema::Failure::Kind::NONFINITE:
      return "nonfinite";
    case schema::Failure::Kind::EXCEPTION:
      return "exception";
    case schema::Failure::Kind::SIGNAL:
      return "signal";
  }
  return "?";
}

}  // namespace

uint64_t valueBytes(schema::Value::Reader v) {
  switch (v.which()) {
    case schema::Value::TENSOR:
      return v.getTensor().getData().getSize();
    case schema::Value::BYTES:
      return v.getBytes().size();
    case schema::Value::TEXT:
      return v.getText().size();
    case schema::Value::LIST: {
      uint64_t n = 0;
      for (auto c : v.getList()) n += valueBytes(c);
      return n;
    }
    case schema::Value::TUPLE: {
      uint64_t n = 0;
      for (auto c : v.getTuple()) n += valueBytes(c);
      return n;
    }
    case schema::Value::DICT: {
      uint64_t n = 0;
      for (auto c : v.getDict()) n += valueBytes(c.getValue());
      return n;
    }
    default:
      return 8;
  }
}

std::unique_ptr<Trace> Trace::open(const std::string& path, OpenMode mode) {
  std::unique_ptr<Trace> t(new Trace());
  t->path_ = path;
  t->dir_ = openTraceDir(path);
  auto names = listStreams(t->dir_.get());
  if (names.empty())
    throw TraceError(ErrorKind::NotATrace,
                     path + " holds no dlrr streams (*.dls): not a trace, or recording never started");
  std::optional<TraceError> first;
  for (const auto& n : names) {
    try {
      t->streams_.push_back(StreamReader::open(t->dir_.get(), n + kStreamExt, n));
    } catch (const TraceError& e) {
      if (mode == OpenMode::Strict || e.kind() == ErrorKind::FutureVersion) throw;
      t->broken_.push_back({n, e.kind(), e.what(), e.torn()});
      if (!first) first = e;
    }
  }
  if (t->streams_.empty()) throw *first;
  return t;
}

std::unique_ptr<Trace> Trace::fromStreams(const std::string& displayPath,
                                          std::vector<std::unique_ptr<StreamReader>> streams) {
  std::unique_ptr<Trace> t(new Trace());
  t->path_ = displayPath;
  t->streams_ = std::move(streams);
  return t;
}

StreamReader* Trace::find(const std::string& name) {
  for (auto& s : streams_)
    if (s->name() == name) return s.get();
  return nullptr;
}

StreamReader* Trace::mainStream() {
  if (!main_) {
    StreamReader* best = nullptr;
    uint64_t bestSteps = 0;
    for (auto& s : streams_) {
      if (s->header().getRole() != schema::StreamHeader::Role::PROCESS) continue;
      uint64_t n = 0;
      try {
        s->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) { n += e.isStepBegin(); });
      } catch (const TraceError&) {  // best effort: damaged streams still count what they hold
      }
      if (!best || n > bestSteps) {
        best = s.get();
        bestSteps = n;
      }
    }
    main_ = best ? best->name() : std::string();
  }
  return main_->empty() ? nullptr : find(*main_);
}

StreamReader* Trace::launcher() {
  if (StreamReader* l = find(kLauncherName)) return l;
  // torchrun ... dlrecord: one launcher per rank (launcher.rank0, ...); the first stands for all.
  StreamReader* best = nullptr;
  for (auto& s : streams_)
    if (s->header().getRole() == schema::StreamHeader::Role::LAUNCHER && (!best || s->name() < best->name()))
      best = s.get();
  return best;
}

StreamReader* Trace::findRank(int rank, int restart) {
  StreamReader* best = nullptr;
  for (auto& s : streams_) {
    auto h = s->header();
    if (h.getRole() != schema::StreamHeader::Role::PROCESS || h.getRank() != rank) continue;
    if (restart >= 0 && h.getRestartCount() == restart) return s.get();
    if (!best || h.getRestartCount() > best->header().getRestartCount() ||
        (h.getRestartCount() == best->header().getRestartCount() &&
         h.getStartNs() < best->header().getStartNs()))  // the rank itself, not a child it started
      best = s.get();
  }
  return best;
}

std::vector<StepInfo> Trace::steps(StreamReader& s) {
  std::vector<StepInfo> out;
  forEachStep(s, [&](const StepInfo& si) { out.push_back(si); });
  return out;
}

void Trace::forEachStep(StreamReader& s, const std::function<void(const StepInfo&)>& fn) {
  struct Pending {
    uint64_t batchBytes = 0;
    std::vector<uint64_t> digestWords;  // what the fingerprint hashes
    uint64_t digestEvents = 0;
  };
  std::map<int64_t, Pending> pending;  // steps begun and not yet ended
  s.forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
    if (e.isBatch()) {
      pending[e.getStep()].batchBytes += valueBytes(e.getBatch().getValue());
    } else if (e.isDigest()) {
      auto d = e.getDigest();
      auto path = d.getPath();
      Pending& p = pending[e.getStep()];
      p.digestWords.insert(p.digestWords.end(), {static_cast<uint64_t>(d.getKind()), hash64(path.begin(), path.size()),
                                                 d.getCallIndex(), d.getOutput(), d.getHash()});
      ++p.digestEvents;
    } else if (e.isStepEnd()) {
      auto se = e.getStepEnd();
      StepInfo si;
      si.step = se.getStep();
      si.loss = se.getLoss();
      si.nonFinite = se.getNonFinite();
      si.digests = se.getDigests();
      si.untrained = se.getUntrained();
      auto it = pending.find(si.step);
      if (it != pending.end()) {
        si.batchBytes = it->second.batchBytes;
        si.digestEvents = it->second.digestEvents;
        if (!it->second.digestWords.empty())
          si.digestFingerprint =
              hash64(it->second.digestWords.data(), it->second.digestWords.size() * sizeof(uint64_t));
        pending.erase(pending.begin(), std::next(it));  // earlier steps can no longer end
      }
      fn(si);
    }
  });
}

TraceSummary Trace::summarize() {
  TraceSummary sum;
  // The newest format any stream uses (a process's that uses bulk files says 2).
  const StreamStatus* newest = nullptr;
  for (auto& s : streams_) {
    const StreamStatus& st = s->status();
    if (!newest || std::pair(st.formatMajor, st.formatMinor) > std::pair(newest->formatMajor, newest->formatMinor))
      newest = &st;
  }
  if (newest) sum.formatVersion = std::to_string(newest->formatMajor) + "." + std::to_string(newest->formatMinor);
  if (StreamReader* l = launcher()) {
    auto h = l->header();
    auto ti = h.getTrace();
    for (auto a : ti.getCommand()) sum.command.emplace_back(a.cStr());
    sum.host = ti.getHost().cStr();
    sum.user = ti.getUser().cStr();
    sum.createdNs = ti.getCreatedNs();
  }
  StreamReader* mainS = mainStream();
  if (mainS) sum.mainStream = mainS->name();
  std::optional<FailureInfo> anyFailure, anyCrash;
  for (auto& s : streams_) {
    StreamSummary ss;
    auto h = s->header();
    ss.name = s->name();
    ss.role = h.getRole() == schema::StreamHeader::Role::LAUNCHER ? "launcher" : "process";
    ss.pid = h.getPid();
    ss.ppid = h.getPpid();
    for (auto a : h.getArgv()) ss.argv.emplace_back(a.cStr());
    ss.cleanClose = s->status().cleanClose;
    ss.damage = s->status().damage;
    ss.torn = s->status().torn;
    ss.fileBytes = s->status().fileSize;
    for (const auto& f : s->frames()) {
      ss.bytes += kFrameHeaderSize + f.header.storedLen;
      ss.rawBytes += f.header.rawLen + kFrameHeaderSize;
    }
    std::optional<FailureInfo> first, crash;
    int64_t lastEnded = -1;
    try {
      s->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
        ++ss.events;
        if (e.isStepEnd()) {
          ++(e.getStepEnd().getUntrained() ? ss.untrainedSteps : ss.steps);
          lastEnded = std::max(lastEnded, e.getStep());
        }
        if (e.isProcessExit()) ss.exitCode = e.getProcessExit().getExitCode();
        if (e.isRecorderStatus())  // what was not recorded, and informational notes
          sum.notes.push_back(ss.name + ": " + e.getRecorderStatus().getMessage().cStr());
        if (e.isFailure() && !crash && e.getFailure().getKind() != schema::Failure::Kind::NONFINITE) {
          crash = failureInfo(e.getFailure(), ss.name);
          crash->betweenSteps = crash->step >= 0 && crash->step <= lastEnded;
        }
        if (e.isFailure() && !first) {
          first = failureInfo(e.getFailure(), ss.name);
          first->betweenSteps = first->step >= 0 && first->step <= lastEnded;
        } else if (first && e.isTensor() && e.getStep() == first->step && first->ringWritten < first->ringTensors) {
          ++first->ringWritten;  // the ring's tensors follow their failure event
        }
      });
    } catch (const TraceError& e) {
      if (ss.damage.empty() || ss.torn) ss.damage = e.what();
      ss.torn = false;
    }
    ss.failure = first;
    ss.crash = crash;
    if (first && (s.get() == mainS)) sum.failure = first;
    if (first && !anyFailure) anyFailure = first;
    if (crash && (s.get() == mainS)) sum.crash = crash;
    if (crash && !anyCrash) anyCrash = crash;
    if (s.get() == mainS) {
      sum.steps = ss.steps;
      sum.untrainedSteps = ss.untrainedSteps;
    }
    // One launcher per rank (torchrun ... dlrecord): the job failed if any rank did.
    if (ss.role == "launcher" && ss.exitCode && (!sum.exitCode || *sum.exitCode == 0)) sum.exitCode = ss.exitCode;
    sum.bytes += ss.bytes + kFileHeaderSize;
    sum.rawBytes += ss.rawBytes + kFileHeaderSize;
    sum.fileBytes += ss.fileBytes;
    sum.processes.push_back(std::move(ss));
  }
  // A process whose exit code its own library could not know (-1: it left by returning from
  // main, as Python does) gets the status its launcher saw when it is the launcher's child.
  std::map<int, int> launcherSaw;
  for (auto& s : streams_) {
    if (s->header().getRole() != schema::StreamHeader::Role::LAUNCHER) continue;
    try {
      s->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
        if (e.isProcessExit()) launcherSaw[e.getProcessExit().getPid()] = e.getProcessExit().getExitCode();
      });
    } catch (const TraceError&) {  // best effort: a damaged launcher stream: its children keep their own codes
    }
  }
  for (auto& p : sum.processes) {
    if (p.role != "process" || !p.exitCode || *p.exitCode != -1) continue;
    auto it = launcherSaw.find(p.pid);
    p.exitCode = it != launcherSaw.end() ? std::optional<int>(it->second) : std::nullopt;
  }
  if (!sum.failure) sum.failure = anyFailure;
  if (!sum.crash) sum.crash = anyCrash;
  sum.broken = broken_;
  return sum;
}

FailureInfo failureInfo(schema::Failure::Reader f, const std::string& stream) {
  FailureInfo fi;
  fi.kind = failureKindName(f.getKind());
  fi.step = f.getStep();
  fi.where = f.getWhere().cStr();
  fi.message = f.getMessage().cStr();
  fi.exceptionType = f.getExceptionType().cStr();
  fi.signal = f.getSignal();
  fi.stream = stream;
  fi.ringTensors = f.getRingTensors();
  fi.ringChanged = f.getRingChanged();
  return fi;
}

std::string formatFailure(const FailureInfo& f) {
  std::string at = f.step < 0       ? " before the first step"
                   : f.betweenSteps ? " after step " + std::to_string(f.step) + " (no step open)"
                                    : " at step " + std::to_string(f.step);
  if (f.kind == "nonfinite")
    return "first non-finite value" + at + ": " + f.where + (f.message.empty() ? "" : " (" + f.message + ")");
  if (f.kind == "exception")
    return "exception" + at + ": " + f.exceptionType + (f.message.empty() ? "" : ": " + f.message);
  return "fatal signal" + at + ": " + f.message;
}

}  // namespace dlrr
