// Reads what the report and the Chrome trace export show: one pass over each stream, then the
// failing sample's bytes (blobs cannot be read from inside an event callback).
#include "tools/dltrace/ReportData.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>

#include "tools/common/Text.h"
#include "tools/dltrace/EventText.h"

namespace dlrr::tools {
namespace {

// A tensor leaf of a batch, copied out of the event.
struct Leaf {
  std::string path;
  std::string dtype;
  std::vector<int64_t> shape;
  Hash128 hash;
  uint64_t size = 0;
};

struct BatchCopy {
  uint32_t loader = 0;
  uint64_t index = 0;
  std::string description;
  std::vector<Leaf> leaves;
  std::vector<int64_t> sampleIndices;
};

void collectLeaves(schema::Value::Reader v, const std::string& prefix, std::vector<Leaf>& out) {
  if (out.size() >= 16) return;
  auto child = [&](const std::string& n) { return prefix.empty() ? n : prefix + "." + n; };
  switch (v.which()) {
    case schema::Value::TENSOR: {
      auto t = v.getTensor();
      Leaf l{
          prefix, t.getDtype().cStr(), {}, {t.getData().getHashLo(), t.getData().getHashHi()}, t.getData().getSize()};
      for (auto d : t.getShape()) l.shape.push_back(d);
      out.push_back(std::move(l));
      return;
    }
    case schema::Value::LIST:
      for (unsigned i = 0; i < v.getList().size(); ++i) collectLeaves(v.getList()[i], child(std::to_string(i)), out);
      return;
    case schema::Value::TUPLE:
      for (unsigned i = 0; i < v.getTuple().size(); ++i) collectLeaves(v.getTuple()[i], child(std::to_string(i)), out);
      return;
    case schema::Value::DICT:
      for (auto e : v.getDict()) collectLeaves(e.getValue(), child(printable(e.getKey().cStr())), out);
      return;
    default:
      return;
  }
}

// Element size of the dtypes a sample is shown for; 0 for the rest.
size_t elementSize(const std::string& dtype) {
  if (dtype == "float32" || dtype == "int32") return 4;
  if (dtype == "float64" || dtype == "int64") return 8;
  if (dtype == "uint8" || dtype == "int8" || dtype == "bool") return 1;
  if (dtype == "int16") return 2;
  return 0;
}

double elementAt(const std::string& dtype, const uint8_t* p) {
  if (dtype == "float32") {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  if (dtype == "float64") {
    double d;
    std::memcpy(&d, p, 8);
    return d;
  }
  if (dtype == "int32") {
    int32_t i;
    std::memcpy(&i, p, 4);
    return i;
  }
  if (dtype == "int64") {
    int64_t i;
    std::memcpy(&i, p, 8);
    return static_cast<double>(i);
  }
  if (dtype == "int16") {
    int16_t i;
    std::memcpy(&i, p, 2);
    return i;
  }
  if (dtype == "int8") return static_cast<int8_t>(*p);
  return *p;  // uint8, bool
}

bool isFloat(const std::string& dtype) { return dtype == "float32" || dtype == "float64"; }

// [N,C,H,W] with C in 1/3/4, or [N,H,W]: a batch of images.
bool looksLikeImages(const Leaf& l) {
  if (!elementSize(l.dtype) || l.dtype == "bool") return false;
  if (l.shape.size() == 4)
    return (l.shape[1] == 1 || l.shape[1] == 3 || l.shape[1] == 4) && l.shape[2] >= 4 && l.shape[3] >= 4;
  return l.shape.size() == 3 && l.shape[1] >= 8 && l.shape[2] >= 8;
}

bool looksLikeTokens(const Leaf& l) {
  return (l.dtype == "int64" || l.dtype == "int32") && l.shape.size() == 2 && l.shape[1] >= 2;
}

std::optional<Sample> readSample(StreamReader& s, const BatchCopy& b, std::vector<std::string>& warnings) {
  Sample out;
  out.batchDescription = b.description;
  const Leaf* pick = nullptr;
  for (const auto& l : b.leaves)
    if (!pick && looksLikeImages(l)) pick = &l;
  for (const auto& l : b.leaves)
    if (!pick && looksLikeTokens(l)) pick = &l;
  for (const auto& l : b.leaves)
    if (!pick && !l.shape.empty() && elementSize(l.dtype)) pick = &l;
  if (!pick) {
    out.note = "the batch holds no tensor to show (" + b.description + ")";
    return out;
  }
  out.field = pick->path.empty() ? "(the whole batch)" : pick->path;
  size_t es = elementSize(pick->dtype);
  uint64_t n = 1;
  for (int64_t d : pick->shape) {
    if (d <= 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return out;
  }
  if (n * es != pick->size || pick->shape[0] <= 0) {
    warnings.push_back("the failing batch's field " + out.field + ": shape and size disagree");
    return std::nullopt;
  }
  std::vector<uint8_t> bytes;
  try {
    bytes = s.readBlob(pick->hash, pick->size);
  } catch (const TraceError& e) {
    warnings.push_back(std::string("the failing batch's bytes: ") + e.what());
    return std::nullopt;
  }
  const uint64_t per = n / static_cast<uint64_t>(pick->shape[0]);
  // The first sample holding a non-finite value, else the first one.
  out.index = 0;
  out.why = "the batch's first sample (none holds a non-finite value)";
  if (isFloat(pick->dtype)) {
    for (int64_t i = 0; i < pick->shape[0]; ++i) {
      bool bad = false;
      for (uint64_t k = 0; k < per && !bad; ++k)
        bad = !std::isfinite(elementAt(pick->dtype, &bytes[(i * per + k) * es]));
      if (bad) {
        out.index = i;
        out.why = "the batch's first sample with non-finite values";
        break;
      }
    }
  }
  if (out.index < static_cast<int64_t>(b.sampleIndices.size())) out.datasetIndex = b.sampleIndices[out.index];
  const uint8_t* base = &bytes[out.index * per * es];
  if (looksLikeTokens(*pick)) {
    for (uint64_t k = 0; k < per && k < 512; ++k)
      out.tokens.push_back(static_cast<int64_t>(elementAt(pick->dtype, base + k * es)));
    return out;
  }
  if (!looksLikeImages(*pick)) {
    for (uint64_t k = 0; k < per && k < 64; ++k) out.values.push_back(elementAt(pick->dtype, base + k * es));
    return out;
  }
  int c = pick->shape.size() == 4 ? static_cast<int>(pick->shape[1]) : 1;
  int h = static_cast<int>(pick->shape[pick->shape.size() - 2]);
  int w = static_cast<int>(pick->shape.back());
  out.height = h, out.width = w, out.channels = c == 4 ? 3 : c;  // alpha dropped
  out.pixels.resize(static_cast<size_t>(h) * w * out.channels);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int ch = 0; ch < out.channels; ++ch) {
        double v = elementAt(pick->dtype, base + (static_cast<uint64_t>(ch) * h * w + y * w + x) * es);
        out.pixels[(static_cast<size_t>(y) * w + x) * out.channels + ch] = v;
      }
  for (size_t i = 0; i < out.pixels.size(); i += out.channels) {
    bool bad = false;
    for (int ch = 0; ch < out.channels; ++ch) bad |= !std::isfinite(out.pixels[i + ch]);
    out.nonFinitePixels += bad;
  }
  return out;
}

// lr of the first optimizer's first parameter group in a snapshot's state tree.
std::optional<double> snapshotLr(schema::Value::Reader v) {
  auto field = [](schema::Value::Reader d, const char* key) -> std::optional<schema::Value::Reader> {
    if (!d.isDict()) return std::nullopt;
    for (auto e : d.getDict())
      if (std::strcmp(e.getKey().cStr(), key) == 0) return e.getValue();
    return std::nullopt;
  };
  auto first = [](schema::Value::Reader l) -> std::optional<schema::Value::Reader> {
    if (l.isList() && l.getList().size()) return l.getList()[0];
    if (l.isTuple() && l.getTuple().size()) return l.getTuple()[0];
    return std::nullopt;
  };
  auto opts = field(v, "optimizers");
  if (!opts) return std::nullopt;
  auto opt = first(*opts);
  if (!opt) return std::nullopt;
  auto groups = field(*opt, "param_groups");
  if (!groups) return std::nullopt;
  auto g = first(*groups);
  if (!g) return std::nullopt;
  auto lr = field(*g, "lr");
  if (!lr) return std::nullopt;
  if (lr->isFloat()) return lr->getFloat();
  if (lr->isInt()) return static_cast<double>(lr->getInt());
  return std::nullopt;
}

void addCell(HeatMap& m, std::map<std::string, size_t>& rowOf, const std::string& path, int64_t step, double lo,
             double hi, uint64_t nonFinite) {
  auto it = rowOf.find(path);
  if (it == rowOf.end()) {
    if (m.rows.size() >= kHeatRows) {
      ++m.droppedRows;
      rowOf[path] = SIZE_MAX;
      return;
    }
    it = rowOf.emplace(path, m.rows.size()).first;
    m.rows.push_back(path);
  }
  if (it->second == SIZE_MAX) return;
  HeatCell& c = m.cells[{it->second, step}];
  double a = -1;
  if (std::isfinite(lo)) a = std::max(a, std::fabs(lo));
  if (std::isfinite(hi)) a = std::max(a, std::fabs(hi));
  c.maxAbs = std::max(c.maxAbs, a);
  c.nonFinite += nonFinite;
}

// The stream the report is about: where the first non-finite value began, else the failing
// process, else the one that trained.
std::string focusStream(Trace& trace, const TraceSummary& s, const RankReport& ranks) {
  if (ranks.origin)
    for (const auto& r : ranks.ranks)
      if (r.rank == ranks.origin->rank) return r.stream;
  if (s.failure && trace.find(s.failure->stream)) return s.failure->stream;
  return s.mainStream;
}

}  // namespace

ReportData gatherReport(Trace& trace) {
  ReportData d;
  d.summary = trace.summarize();
  d.ranks = analyzeRanks(trace);
  d.mainStream = focusStream(trace, d.summary, d.ranks);
  d.gradients.title = "gradients: largest |value| per parameter (log10)";
  d.activations.title = "activations: largest |output| per module (log10)";

  int64_t lastStep = -1;
  std::optional<int64_t> failStep;
  if (d.ranks.origin)
    failStep = d.ranks.origin->failure.step;
  else if (d.summary.failure && d.summary.failure->stream == d.mainStream)
    failStep = d.summary.failure->step;

  for (auto& sp : trace.streams()) {
    StreamReader& s = *sp;
    auto h = s.header();
    StreamTimeline tl;
    tl.stream = s.name();
    tl.role = h.getRole() == schema::StreamHeader::Role::LAUNCHER ? "launcher" : "process";
    tl.pid = h.getPid();
    tl.rank = h.getRank();
    tl.startNs = h.getStartNs();
    tl.endNs = tl.startNs;
    const bool focus = s.name() == d.mainStream;
    std::map<std::string, size_t> gradRow, actRow;
    std::deque<BatchCopy> recentBatches;  // a step's batch is matched by (loader, index)
    std::optional<BatchCopy> failingBatch;
    std::optional<std::pair<uint32_t, uint64_t>> failingBegin;  // (loader, batch index) of the failing step
    std::map<int64_t, size_t> stepIndex;
    int64_t epoch = -1, epochStart = -1, firstStepNs = -1, lastEndNs = -1;
    auto closeEpoch = [&](int64_t endNs) {
      if (epoch >= 0 && epochStart >= 0) tl.phases.push_back({epochStart, endNs, "epoch " + std::to_string(epoch), ""});
    };
    try {
      s.forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
        const int64_t ns = tl.startNs + e.getTNs();
        tl.endNs = std::max(tl.endNs, ns);
        switch (e.which()) {
          case schema::Event::STEP_BEGIN: {
            auto b = e.getStepBegin();
            if (firstStepNs < 0) firstStepNs = ns;
            if (b.getEpoch() != epoch) {
              closeEpoch(ns);
              epoch = b.getEpoch();
              epochStart = ns;
            }
            tl.steps.push_back({ns, -1, "step " + std::to_string(b.getStep()), ""});
            if (focus) {
              stepIndex[b.getStep()] = d.steps.size();
              StepPoint p;
              p.step = b.getStep();
              p.beginNs = ns;
              p.epoch = b.getEpoch();
              p.loss = std::nan("");
              d.steps.push_back(p);
              if (failStep && b.getStep() == *failStep) {
                failingBegin = std::make_pair(b.getLoader(), b.getBatchIndex());
                for (const auto& bc : recentBatches)
                  if (bc.loader == b.getLoader() && bc.index == b.getBatchIndex()) failingBatch = bc;
              }
            }
            break;
          }
          case schema::Event::STEP_END: {
            auto x = e.getStepEnd();
            lastEndNs = ns;
            if (!tl.steps.empty() && tl.steps.back().endNs < 0) tl.steps.back().endNs = ns;
            if (focus) {
              auto it = stepIndex.find(x.getStep());
              if (it == stepIndex.end()) break;
              StepPoint& p = d.steps[it->second];
              p.endNs = ns;
              p.loss = x.getLoss();
              p.untrained = x.getUntrained();
              p.nonFinite = x.getNonFinite();
              lastStep = std::max(lastStep, x.getStep());
            }
            break;
          }
          case schema::Event::BATCH: {
            if (!focus) break;
            auto b = e.getBatch();
            BatchCopy bc;
            bc.loader = b.getLoader();
            bc.index = b.getIndex();
            bc.description = describeValue(b.getValue());
            collectLeaves(b.getValue(), "", bc.leaves);
            for (auto i : b.getSampleIndices()) bc.sampleIndices.push_back(i);
            // The batch that began the failing step comes right after its StepBegin.
            if (failingBegin && !failingBatch && bc.loader == failingBegin->first && bc.index == failingBegin->second)
              failingBatch = bc;
            recentBatches.push_back(std::move(bc));
            if (recentBatches.size() > 8) recentBatches.pop_front();
            break;
          }
          case schema::Event::DIGEST: {
            if (!focus) break;
            auto g = e.getDigest();
            auto k = g.getKind();
            HeatMap* m = k == schema::TensorDigest::Kind::GRADIENT        ? &d.gradients
                         : k == schema::TensorDigest::Kind::MODULE_OUTPUT ? &d.activations
                                                                          : nullptr;
            if (!m) break;
            std::string path = printable(g.getPath().cStr());
            if (path.empty()) path = "(root)";
            addCell(*m, m == &d.gradients ? gradRow : actRow, path, e.getStep(), g.getMin(), g.getMax(),
                    g.getNanCount() + g.getInfCount());
            break;
          }
          case schema::Event::SNAPSHOT: {
            if (!focus) break;
            if (auto lr = snapshotLr(e.getSnapshot().getValue())) d.lr.push_back({e.getSnapshot().getStep(), *lr});
            break;
          }
          case schema::Event::COLLECTIVE: {
            auto c = e.getCollective();
            uint64_t bad = 0;
            for (auto t : c.getResults()) bad += t.getNanCount() + t.getInfCount();
            tl.collectives.push_back({ns, -1, collectiveDisplayName(c.getOp().cStr()),
                                      "seq " + std::to_string(c.getSeq()) + ", step " + std::to_string(e.getStep()) +
                                          (bad ? ", non-finite results" : "")});
            break;
          }
          case schema::Event::FAILURE: {
            FailureInfo f = failureInfo(e.getFailure(), s.name());
            tl.failures.push_back({ns, -1, f.kind, formatFailure(f)});
            break;
          }
          default:
            break;
        }
      });
    } catch (const TraceError& e) {
      d.warnings.push_back(s.name() + ": read up to damage: " + e.what());
    }
    closeEpoch(lastEndNs >= 0 ? lastEndNs : tl.endNs);
    if (firstStepNs > tl.startNs) tl.phases.insert(tl.phases.begin(), {tl.startNs, firstStepNs, "init", ""});
    if (lastEndNs >= 0 && tl.endNs > lastEndNs) tl.phases.push_back({lastEndNs, tl.endNs, "shutdown", ""});
    if (focus && failingBatch) d.sample = readSample(s, *failingBatch, d.warnings);
    if (focus && failStep && !failingBatch) {
      Sample none;
      none.note = "no DataLoader batch began the failing step";
      d.sample = none;
    }
    d.timeline.push_back(std::move(tl));
  }

  // The heat maps keep the steps before the failure (or the last ones).
  int64_t hi = failStep ? *failStep : lastStep;
  for (HeatMap* m : {&d.gradients, &d.activations}) {
    std::map<std::pair<size_t, int64_t>, HeatCell> kept;
    std::map<int64_t, bool> steps;
    for (const auto& [k, c] : m->cells)
      if (k.second <= hi && k.second > hi - kHeatSteps && k.second >= 0) {
        kept[k] = c;
        steps[k.second] = true;
      }
    m->cells = std::move(kept);
    for (const auto& [st, _] : steps) m->steps.push_back(st);
  }
  return d;
}

}  // namespace dlrr::tools
