#include "triage/TraceFacts.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>

#include "triage/Concurrency.h"
#include "triage/Ranks.h"

namespace dlrr::triage {
namespace {

std::string str(capnp::Text::Reader t) { return std::string(t.begin(), t.size()); }

FailureRecord toRecord(schema::Failure::Reader f, int64_t tNs, const std::string& stream) {
  FailureRecord r;
  switch (f.getKind()) {
    case schema::Failure::Kind::NONFINITE:
      r.kind = "nonfinite";
      break;
    case schema::Failure::Kind::EXCEPTION:
      r.kind = "exception";
      break;
    case schema::Failure::Kind::SIGNAL:
      r.kind = "signal";
      break;
  }
  r.exceptionType = str(f.getExceptionType());
  r.message = str(f.getMessage());
  r.where = str(f.getWhere());
  for (auto fr : f.getTraceback())
    r.traceback.push_back({str(fr.getFile()), fr.getLine(), str(fr.getFunction()), str(fr.getCode())});
  r.signal = f.getSignal();
  r.signalCode = f.getSignalCode();
  r.faultAddress = f.getFaultAddress();
  r.step = f.getStep();
  r.tNs = tNs;
  r.stream = stream;
  r.pythonStack = str(f.getPythonStack());
  return r;
}

ResourceRecord toRecord(schema::ResourcePeak::Reader p) {
  ResourceRecord r;
  r.reason = str(p.getReason());
  r.maxRss = p.getMaxRssBytes();
  r.vmPeak = p.getVmPeakBytes();
  r.addressSpaceLimit = p.getAddressSpaceLimit();
  r.memoryLimit = p.getMemoryLimit();
  r.memTotal = p.getMemTotal();
  r.oomKills = p.getOomKills();
  for (auto g : p.getGpus()) r.gpus.push_back({g.getDevice(), g.getMaxAllocated(), g.getMaxReserved(), g.getTotal()});
  return r;
}

struct StreamScan {
  std::string name;
  std::optional<FailureRecord> failure;
  std::optional<FailureRecord> nonfinite;
  Timeline atFailure, atNonfinite, atEnd;
  std::map<std::string, std::string> runtime;
  std::optional<ResourceRecord> peak;
  std::vector<PackageRecord> packages;
  uint64_t steps = 0;
};

// CLOCK_REALTIME of an event `sinceStart` ns after a stream that started at `startRealNs`; 0
// (unknown) for times a damaged or foreign trace makes negative or out of range.
int64_t realNs(int64_t startRealNs, int64_t sinceStart) {
  int64_t sum = 0;
  if (startRealNs <= 0 || sinceStart < 0 || __builtin_add_overflow(startRealNs, sinceStart, &sum)) return 0;
  return sum;
}

void update(Timeline& t, schema::Event::Reader e) {
  using E = schema::Event;
  t.endNs = e.getTNs();
  switch (e.which()) {
    case E::STEP_BEGIN: {
      auto sb = e.getStepBegin();
      ++t.stepsBegun;
      t.lastStepBegun = sb.getStep();
      t.stepOpen = true;
      t.byOptimizer = sb.getByOptimizer() || sb.getByBackward() || sb.getByGradientCall();
      t.byBackward = sb.getByBackward();
      t.byGradientCall = sb.getByGradientCall();
      t.trainingLoader = sb.getLoader();
      t.trainingLoaderEnded = false;
      t.evalBatchSeen = false;
      if (t.firstStepNs < 0) t.firstStepNs = e.getTNs();
      break;
    }
    case E::STEP_END: {
      auto se = e.getStepEnd();
      ++t.stepsCompleted;
      t.lastStepEnded = se.getStep();
      t.stepOpen = false;
      t.lastStepEndNs = e.getTNs();
      double loss = se.getLoss();
      // NaN also means "no loss seen": it counts as non-finite only with non-finite digests.
      if (std::isfinite(loss)) {
        t.lastFiniteLoss = loss;
        t.lastFiniteLossStep = se.getStep();
        t.haveLoss = true;
      } else if ((std::isinf(loss) || se.getNonFinite() > 0) && t.firstNonFiniteLossStep < 0) {
        t.firstNonFiniteLossStep = se.getStep();
        t.haveLoss = true;
      }
      t.lastLoss = loss;
      break;
    }
    case E::BATCH: {
      auto b = e.getBatch();
      if (b.getIsTraining()) {
        t.evalBatchSeen = false;
      } else {
        t.evalBatchSeen = true;
        t.evalLoader = b.getLoader();
        t.evalBatch = b.getIndex();
      }
      break;
    }
    case E::LOADER_END: {
      auto le = e.getLoaderEnd();
      if (t.stepsBegun > 0 && !t.byOptimizer && le.getLoader() == t.trainingLoader) t.trainingLoaderEnded = true;
      if (t.evalBatchSeen && le.getLoader() == t.evalLoader) t.evalBatchSeen = false;  // that evaluation ended
      break;
    }
    case E::PACKAGES:
      if (str(e.getPackages().getReason()) == "exit") t.exiting = true;
      break;
    case E::RESOURCE_PEAK:
      if (str(e.getResourcePeak().getReason()) == "exit") t.exiting = true;
      break;
    default:
      break;
  }
}

struct TensorToScan {
  std::string field;
  std::string dtype;
  std::vector<int64_t> shape;
  Hash128 hash;
  uint64_t size = 0;
};

void collectTensors(schema::Value::Reader v, const std::string& path, std::vector<TensorToScan>& out, int depth = 0) {
  if (depth > 16 || out.size() > 64) return;
  switch (v.which()) {
    case schema::Value::TENSOR: {
      auto t = v.getTensor();
      TensorToScan s;
      s.field = path;
      s.dtype = str(t.getDtype());
      for (auto d : t.getShape()) s.shape.push_back(d);
      s.hash = Hash128{t.getData().getHashLo(), t.getData().getHashHi()};
      s.size = t.getData().getSize();
      out.push_back(std::move(s));
      break;
    }
    case schema::Value::LIST:
    case schema::Value::TUPLE: {
      auto l = v.isList() ? v.getList() : v.getTuple();
      for (unsigned i = 0; i < l.size(); ++i)
        collectTensors(l[i], path.empty() ? std::to_string(i) : path + "." + std::to_string(i), out, depth + 1);
      break;
    }
    case schema::Value::DICT:
      for (auto e : v.getDict()) {
        std::string k = str(e.getKey());
        collectTensors(e.getValue(), path.empty() ? k : path + "." + k, out, depth + 1);
      }
      break;
    default:
      break;
  }
}

bool nonFiniteAt(const std::string& dtype, const uint8_t* p) {
  if (dtype == "float32") {
    uint32_t b;
    std::memcpy(&b, p, 4);
    return (b & 0x7F800000u) == 0x7F800000u;
  }
  if (dtype == "float64") {
    uint64_t b;
    std::memcpy(&b, p, 8);
    return (b & 0x7FF0000000000000ull) == 0x7FF0000000000000ull;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  if (dtype == "float16") return (h & 0x7C00u) == 0x7C00u;
  return (h & 0x7F80u) == 0x7F80u;  // bfloat16
}

// The samples of step `step`'s batch that hold non-finite values.
std::vector<std::string> scanStepBatch(StreamReader& s, int64_t step) {
  std::vector<std::string> out;
  uint32_t loader = 0;
  uint64_t index = 0;
  bool haveStep = false;
  std::vector<TensorToScan> tensors;
  std::vector<int64_t> samples;
  std::map<std::pair<uint32_t, uint64_t>, std::pair<std::vector<TensorToScan>, std::vector<int64_t>>> recent;
  try {
    // The recorder writes a step's StepBegin right before the batch that began it; older
    // writers wrote the batch first: look both ways.
    bool found = false;
    s.forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
      if (found) return;
      if (e.isBatch()) {
        auto b = e.getBatch();
        std::vector<TensorToScan> ts;
        collectTensors(b.getValue(), "", ts);
        std::vector<int64_t> idx;
        for (auto i : b.getSampleIndices()) idx.push_back(i);
        if (haveStep && b.getLoader() == loader && b.getIndex() == index) {
          tensors = std::move(ts);
          samples = std::move(idx);
          found = true;
          return;
        }
        recent[{b.getLoader(), b.getIndex()}] = {std::move(ts), std::move(idx)};
        if (recent.size() > 8) recent.erase(recent.begin());
      } else if (e.isStepBegin() && e.getStepBegin().getStep() == step && !e.getStepBegin().getByOptimizer()) {
        loader = e.getStepBegin().getLoader();
        index = e.getStepBegin().getBatchIndex();
        auto it = recent.find({loader, index});
        if (it != recent.end()) {
          tensors = it->second.first;
          samples = it->second.second;
          found = true;
        }
        haveStep = true;
      } else if (haveStep && e.isStepEnd()) {
        found = true;  // no batch for it
      }
    });
  } catch (const TraceError&) {  // best effort: damage: the batches read before it are what we have
  }
  uint64_t budget = 256ull << 20;
  for (const auto& t : tensors) {
    bool isFloat = t.dtype == "float32" || t.dtype == "float64" || t.dtype == "float16" || t.dtype == "bfloat16";
    if (!isFloat || t.size > budget || t.shape.empty() || t.shape[0] <= 0) continue;
    budget -= t.size;
    std::vector<uint8_t> bytes;
    try {
      bytes = s.readBlob(t.hash, t.size);
    } catch (const TraceError&) {
      continue;
    }
    size_t es = t.dtype == "float64" ? 8 : t.dtype == "float32" ? 4 : 2;
    size_t n = bytes.size() / es;
    size_t rows = static_cast<size_t>(t.shape[0]);
    size_t per = rows ? n / rows : 0;
    for (size_t r = 0; r < rows && per && out.size() < 10; ++r) {
      uint64_t bad = 0;
      for (size_t i = 0; i < per; ++i) bad += nonFiniteAt(t.dtype, bytes.data() + (r * per + i) * es);
      if (!bad) continue;
      std::string line = "sample " + std::to_string(r) + " of the batch of step " + std::to_string(step);
      if (r < samples.size()) line += " (dataset index " + std::to_string(samples[r]) + ")";
      line += ": " + std::to_string(bad) + " non-finite input value" + (bad > 1 ? "s" : "");
      if (!t.field.empty()) line += " in field " + t.field;
      out.push_back(line);
    }
  }
  return out;
}

}  // namespace

TriageInput gatherFacts(Trace& trace) {
  TriageInput in;
  int64_t launchNs = 0;
  if (StreamReader* l = trace.launcher()) {
    auto ti = l->header().getTrace();
    for (auto a : ti.getCommand()) in.command.push_back(str(a));
    in.host = str(ti.getHost());
    in.user = str(ti.getUser());
    in.uid = ti.getUid();
    for (auto kv : ti.getEnv()) in.env[str(kv.getKey())] = str(kv.getValue());
    launchNs = ti.getCreatedNs();
    try {
      const int64_t start = l->header().getStartNs();
      l->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
        in.recordingEndRealNs = std::max(in.recordingEndRealNs, realNs(start, e.getTNs()));  // the job's exit, last
        if (e.isProcessExit()) in.exitCode = e.getProcessExit().getExitCode();
        if (e.isResourcePeak()) in.launcherPeak = toRecord(e.getResourcePeak());
      });
    } catch (const TraceError&) {  // best effort: a damaged launcher stream: the codes read before it are what we have
    }
  }

  StreamReader* mainStream = trace.mainStream();
  std::vector<StreamReader*> order;
  if (mainStream) order.push_back(mainStream);
  for (auto& s : trace.streams())
    if (s.get() != mainStream && s->header().getRole() == schema::StreamHeader::Role::PROCESS) order.push_back(s.get());

  std::vector<StreamScan> scans;
  std::map<std::tuple<std::string, int, int>, MissingPathRecord> paths;
  std::map<std::string, LibraryErrorRecord> libs;
  for (StreamReader* s : order) {
    StreamScan sc;
    sc.name = s->name();
    Timeline t;
    t.launchRealNs = launchNs;
    t.processStartRealNs = s->header().getStartNs();
    try {
      s->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
        using E = schema::Event;
        switch (e.which()) {
          case E::FAILURE: {
            auto f = e.getFailure();
            bool nonfinite = f.getKind() == schema::Failure::Kind::NONFINITE;
            Timeline snap = t;
            snap.endNs = e.getTNs();
            if (nonfinite && !sc.nonfinite) {
              sc.nonfinite = toRecord(f, e.getTNs(), sc.name);
              sc.atNonfinite = snap;
            } else if (!nonfinite && !sc.failure) {
              sc.failure = toRecord(f, e.getTNs(), sc.name);
              sc.atFailure = snap;
            }
            break;
          }
          case E::RUNTIME_INFO:
            for (auto kv : e.getRuntimeInfo().getItems()) sc.runtime[str(kv.getKey())] = str(kv.getValue());
            break;
          case E::RESOURCE_PEAK:
            sc.peak = toRecord(e.getResourcePeak());
            break;
          case E::PACKAGES:
            sc.packages.clear();
            for (auto p : e.getPackages().getItems())
              sc.packages.push_back({str(p.getName()), str(p.getVersion()), str(p.getPath())});
            break;
          case E::MISSING_PATHS:
            for (auto m : e.getMissingPaths().getPaths()) {
              auto key = std::make_tuple(str(m.getPath()), static_cast<int>(m.getOp()), static_cast<int>(m.getError()));
              auto& rec = paths[key];
              if (rec.path.empty()) {
                rec.path = std::get<0>(key);
                rec.op = std::get<1>(key);
                rec.error = std::get<2>(key);
                rec.firstNs = m.getFirstNs();
                rec.firstStep = m.getFirstStep();
                rec.stream = sc.name;
                rec.firstRealNs = realNs(s->header().getStartNs(), m.getFirstNs());
              }
              rec.count = std::max(rec.count, m.getCount());
            }
            in.droppedPaths = std::max(in.droppedPaths, e.getMissingPaths().getDroppedPaths());
            break;
          case E::LIBRARY_LOAD_ERROR: {
            auto l = e.getLibraryLoadError();
            auto& rec = libs[str(l.getName())];
            if (rec.name.empty()) {
              rec.name = str(l.getName());
              rec.firstNs = l.getFirstNs();
              rec.firstStep = l.getFirstStep();
            }
            rec.error = str(l.getError());
            rec.count = std::max(rec.count, l.getCount());
            break;
          }
          default:
            break;
        }
        update(t, e);
      });
    } catch (const TraceError&) {
      // best effort: a damaged stream: what precedes the damage is what we have.
    }
    sc.atEnd = t;
    in.recordingEndRealNs = std::max(in.recordingEndRealNs, realNs(t.processStartRealNs, t.endNs));
    scans.push_back(std::move(sc));
  }
  // Trainers that raced, processes that ran unrecorded (ranks of torch.distributed share no memory).
  const Concurrency conc = analyzeConcurrency(trace);
  // Trainers that each kept their parameters to themselves (their own models) did not race.
  if (!conc.sharing.empty() || !conc.unknownSharing.empty())
    in.trainingProcesses = static_cast<uint32_t>(conc.trainers.size());
  for (const auto& u : conc.unrecorded)
    in.unrecordedProcesses.push_back("pid " + std::to_string(u.pid) + " " + u.how + " in " + u.parentStream);

  // The failing process: the first with an exception or signal (main stream first), else the
  // first with a non-finite value, else the main stream.
  const StreamScan* chosen = nullptr;
  for (const auto& sc : scans)
    if (sc.failure) {
      chosen = &sc;
      break;
    }
  if (!chosen)
    for (const auto& sc : scans)
      if (sc.nonfinite) {
        chosen = &sc;
        break;
      }
  if (!chosen && !scans.empty()) chosen = &scans.front();
  if (chosen) {
    in.stream = chosen->name;
    in.failure = chosen->failure;
    in.nonfinite = chosen->nonfinite;
    if (chosen->failure)
      in.timeline = chosen->atFailure;
    else if (chosen->nonfinite)
      in.timeline = chosen->atNonfinite;
    else
      in.timeline = chosen->atEnd;
    // Loss figures: the whole recording of that process (the NaN may be at the failure's step).
    in.timeline.lastFiniteLoss = chosen->atEnd.lastFiniteLoss;
    in.timeline.lastFiniteLossStep = chosen->atEnd.lastFiniteLossStep;
    in.timeline.firstNonFiniteLossStep = chosen->atEnd.firstNonFiniteLossStep;
    in.runtime = chosen->runtime;
    in.processPeak = chosen->peak;
    in.packages = chosen->packages;
    if (!in.nonfinite)
      for (const auto& sc : scans)
        if (sc.nonfinite) {
          in.nonfinite = sc.nonfinite;
          break;
        }
  }
  if (in.nonfinite && in.nonfinite->step >= 0)
    if (StreamReader* s = trace.find(in.nonfinite->stream)) in.batchFindings = scanStepBatch(*s, in.nonfinite->step);
  for (auto& [k, v] : paths) in.missingPaths.push_back(v);
  std::sort(in.missingPaths.begin(), in.missingPaths.end(),
            [](const MissingPathRecord& a, const MissingPathRecord& b) { return a.firstNs < b.firstNs; });
  for (auto& [k, v] : libs) in.libraryErrors.push_back(v);
  in.hang = analyzeRanks(trace).hang;
  return in;
}

std::vector<std::string> nonFiniteSamples(StreamReader& s, int64_t step) { return scanStepBatch(s, step); }

}  // namespace dlrr::triage
