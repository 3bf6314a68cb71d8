// The replay side in parts: the RecordingIndex read once from a stream, the batch encoding
// decoded as the Python hook decodes it (pyhook/python/dlrr_hook/batches.py), and the
// ReplayVerifier and ReplaySession built on them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "format/Trace.h"
#include "format/TraceError.h"
#include "recorder/RecordSession.h"
#include "replayer/RecordingIndex.h"
#include "replayer/ReplayReportWriter.h"
#include "replayer/ReplaySession.h"
#include "replayer/ReplayVerifier.h"
#include "support/SampleTrace.h"
#include "support/StreamFixture.h"

namespace dlrr {
namespace {

// ---- A decoder of replayer/BatchEncoding.h, step for step the Python hook's BatchDecoder.
struct Decoded {
  char tag = 'N';
  int64_t i = 0;  // 'B', 'I'
  double f = 0;   // 'F'
  std::string s;  // 'S', 'Y', 'O'; a tensor's dtype
  std::vector<Decoded> items;
  std::vector<std::string> keys;  // 'D', one per item
  std::vector<int64_t> shape;     // 'X'
  bool requiresGrad = false;
  std::string device;
  std::vector<uint8_t> bytes;
};

class Decoder {
 public:
  explicit Decoder(const std::vector<uint8_t>& b) : b_(b) {}
  Decoded all() {
    Decoded v = value(0);
    if (pos_ != b_.size()) throw std::runtime_error("trailing bytes after the batch");
    return v;
  }

 private:
  uint64_t le(size_t n) {
    if (n > b_.size() - pos_) throw std::runtime_error("truncated batch");
    uint64_t v = 0;
    for (size_t k = 0; k < n; ++k) v |= static_cast<uint64_t>(b_[pos_ + k]) << (8 * k);
    pos_ += n;
    return v;
  }
  std::string str() {
    size_t n = le(4);
    if (n > b_.size() - pos_) throw std::runtime_error("truncated string");
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  Decoded value(int depth) {
    if (depth > 64) throw std::runtime_error("nested too deeply");
    Decoded v;
    v.tag = static_cast<char>(le(1));
    switch (v.tag) {
      case 'N':
        break;
      case 'B':
        v.i = static_cast<int64_t>(le(1));
        break;
      case 'I':
        v.i = static_cast<int64_t>(le(8));
        break;
      case 'F': {
        uint64_t bits = le(8);
        std::memcpy(&v.f, &bits, 8);
        break;
      }
      case 'S':
      case 'Y':
      case 'O':
        v.s = str();
        break;
      case 'L':
      case 'T':
        for (uint64_t n = le(4), k = 0; k < n; ++k) v.items.push_back(value(depth + 1));
        break;
      case 'D':
        for (uint64_t n = le(4), k = 0; k < n; ++k) {
          v.keys.push_back(str());
          v.items.push_back(value(depth + 1));
        }
        break;
      case 'X': {
        v.s = str();
        for (uint64_t n = le(4), k = 0; k < n; ++k) v.shape.push_back(static_cast<int64_t>(le(8)));
        v.requiresGrad = le(1) != 0;
        v.device = str();
        uint64_t n = le(8);
        if (n > b_.size() - pos_) throw std::runtime_error("truncated tensor");
        v.bytes.assign(b_.begin() + static_cast<ptrdiff_t>(pos_), b_.begin() + static_cast<ptrdiff_t>(pos_ + n));
        pos_ += n;
        break;
      }
      default:
        throw std::runtime_error(std::string("unknown tag ") + v.tag);
    }
    return v;
  }
  const std::vector<uint8_t>& b_;
  size_t pos_ = 0;
};

void setRef(schema::BlobRef::Builder b, const BlobId& id) {
  b.setHashLo(id.hash.lo);
  b.setHashHi(id.hash.hi);
  b.setSize(id.size);
}

std::vector<uint8_t> bytesOf(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(float));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A stream with one batch of every value kind the encoding has, a batch by reference whose
// bytes are not in the stream, a snapshot and a kept tensor.
struct IndexedStream {
  IndexedStream() : fx("rindex") {
    StreamWriter& w = *fx.writer;
    BlobId x = w.putBlob(images.data(), images.size() * sizeof(float), 4);
    BlobId kept = w.putBlob(keptBytes.data(), keptBytes.size() * sizeof(float), 4);
    std::vector<uint8_t> rng(16, 7);
    BlobId rid = w.putBlob(rng.data(), rng.size());
    auto event = [&](int64_t step, auto&& fill) {
      auto m = testing::eventMessage(step);
      fill(m->getRoot<schema::Event>());
      w.append(*m);
    };
    auto tensor = [&](schema::TensorRef::Builder t, const BlobId& id, int64_t rows) {
      t.setDtype("float32");
      auto shape = t.initShape(2);
      shape.set(0, rows);
      shape.set(1, static_cast<int64_t>(id.size / sizeof(float)) / rows);
      t.setDevice("cpu");
      t.setRequiresGrad(true);
      setRef(t.initData(), id);
    };
    event(-1, [&](schema::Event::Builder e) {
      auto en = e.initEntropy();
      en.setSource(schema::Entropy::Source::GETRANDOM);
      uint8_t b[4] = {1, 2, 3, 4};
      en.setData(kj::arrayPtr(b, 4));
      en.setRequested(4);
    });
    event(0, [&](schema::Event::Builder e) {
      auto sb = e.initStepBegin();
      sb.setStep(0);
      sb.setBatchIndex(0);
    });
    event(0, [&](schema::Event::Builder e) {
      auto r = e.initRngState();
      r.setKind(schema::RngState::Kind::TORCH_CPU);
      setRef(r.initState(), rid);
    });
    event(0, [&](schema::Event::Builder e) {
      auto b = e.initBatch();
      b.setIndex(0);
      b.setIsTraining(true);
      auto idx = b.initSampleIndices(2);
      idx.set(0, 10);
      idx.set(1, 11);
      auto d = b.initValue().initDict(2);
      d[0].setKey("x");
      tensor(d[0].initValue().initTensor(), x, 2);
      d[1].setKey("rest");
      auto t = d[1].initValue().initTuple(7);
      t[0].setNone();
      t[1].setBool(true);
      t[2].setInt(-5);
      t[3].setFloat(0.25);
      t[4].setText("label");
      uint8_t raw[3] = {9, 8, 7};
      t[5].setBytes(kj::arrayPtr(raw, 3));
      t[6].initList(1)[0].setInt(42);
    });
    event(0, [&](schema::Event::Builder e) {
      auto dg = e.initDigest();
      dg.setKind(schema::TensorDigest::Kind::MODULE_OUTPUT);
      dg.setPath("fc");
      dg.setDtype("float32");
      dg.setHash(0xabc);
    });
    event(0, [&](schema::Event::Builder e) {
      auto s = e.initSnapshot();
      s.setStep(0);
      s.setReason(schema::Snapshot::Reason::FAILURE);
      s.initValue().setInt(1);  // replaced by the periodic one below
    });
    event(0, [&](schema::Event::Builder e) {
      auto s = e.initSnapshot();
      s.setStep(0);
      s.setReason(schema::Snapshot::Reason::PERIODIC);
      tensor(s.initValue().initTensor(), kept, 1);
    });
    event(0, [&](schema::Event::Builder e) {
      auto ft = e.initTensor();
      ft.setKind(schema::TensorDigest::Kind::PARAMETER);
      ft.setPath("fc.weight");
      tensor(ft.initTensor(), kept, 1);
    });
    event(0, [&](schema::Event::Builder e) {
      auto se = e.initStepEnd();
      se.setStep(0);
      se.setLoss(0.5);
    });
    w.commit();
    // Batch 1, by reference, outside the window: its blob never reaches the stream.
    std::vector<float> absent = {3, 1, 4, 1};
    missing = Hash128{0x1111, 0x2222};
    event(1, [&](schema::Event::Builder e) {
      auto sb = e.initStepBegin();
      sb.setStep(1);
      sb.setBatchIndex(1);
    });
    event(1, [&](schema::Event::Builder e) {
      auto b = e.initBatch();
      b.setIndex(1);
      b.setByReference(true);
      b.setDigest(77);
      b.initSampleDigests(1).set(0, 78);
      auto t = b.initValue().initTensor();
      t.setDtype("float32");
      t.initShape(1).set(0, 4);
      auto ref = t.initData();
      ref.setHashLo(missing.lo);
      ref.setHashHi(missing.hi);
      ref.setSize(16);
    });
    event(1, [&](schema::Event::Builder e) {
      auto f = e.initFailure();
      f.setKind(schema::Failure::Kind::SIGNAL);
      f.setStep(1);
      f.setSignal(11);
    });
    event(1, [&](schema::Event::Builder e) {
      auto f = e.initFailure();
      f.setKind(schema::Failure::Kind::NONFINITE);
      f.setStep(1);
      f.setWhere("fc");
    });
    w.commit();
    w.close();
    reader = fx.reopen();
  }
  std::vector<float> images = {1.5f, -2.0f, 0.0f, -0.0f, 3.25f, 1e-30f};
  std::vector<float> keptBytes = {7, 8, 9};
  Hash128 missing{};
  testing::StreamFixture fx;
  std::unique_ptr<StreamReader> reader;
};

TEST(RecordingIndex, HoldsEachStepsFactsAndWhereTheBulkLies) {
  IndexedStream s;
  RecordingIndex idx(*s.reader);
  ASSERT_EQ(idx.entropy().size(), 1u);
  EXPECT_EQ(idx.entropy()[0].data, (std::vector<uint8_t>{1, 2, 3, 4}));
  const RecordingIndex::Batch* b = idx.batch(0, 0);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->step, -1);  // its StepBegin came first: the event's own step stands in
  EXPECT_EQ(b->eventStep, 0);
  EXPECT_TRUE(b->training);
  ASSERT_NE(idx.rngAtStep(0), nullptr);  // and the step's, for optimizer-counted loops
  EXPECT_EQ(idx.rngAtStep(0)->size(), 1u);
  EXPECT_EQ(b->sampleIndices, (std::vector<int64_t>{10, 11}));
  ASSERT_EQ(b->rng.size(), 1u);  // the state taken as the batch was delivered
  EXPECT_EQ(b->rng[0].size, 16u);
  EXPECT_FALSE(b->byReference);
  EXPECT_EQ(idx.batch(0, 9), nullptr);
  const RecordingIndex::Batch* ref = idx.batch(0, 1);
  ASSERT_NE(ref, nullptr);
  EXPECT_TRUE(ref->byReference);
  EXPECT_FALSE(ref->bytesInTrace);
  EXPECT_EQ(ref->digest, 77u);
  EXPECT_EQ(ref->sampleDigests, (std::vector<uint64_t>{78}));
  const RecordedDigest* d = idx.digest({0, static_cast<int>(schema::TensorDigest::Kind::MODULE_OUTPUT), "fc", 0, 0});
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->hash, 0xabcu);
  EXPECT_EQ(idx.digestsInStep(0), 1u);
  EXPECT_EQ(idx.digest({1, 0, "fc", 0, 0}), nullptr);
  EXPECT_EQ(idx.loss(0), 0.5);
  EXPECT_FALSE(idx.loss(1));  // the trace ends inside step 1
  EXPECT_EQ(idx.recordedSteps(), 1);
  EXPECT_EQ(idx.lastStepBegun(), 1);
  EXPECT_EQ(idx.snapshots().size(), 1u);
  ASSERT_TRUE(idx.firstFailure());
  EXPECT_EQ(idx.firstFailure()->signal, 11);
  ASSERT_TRUE(idx.firstNonfinite());
  EXPECT_EQ(idx.firstNonfinite()->where, "fc");
  // Digests of fast-forwarded steps are left out.
  RecordingIndex jumped(*s.reader, 1);
  EXPECT_EQ(jumped.digest({0, 0, "fc", 0, 0}), nullptr);
}

TEST(RecordingIndex, EncodesABatchThePythonDecoderReadsBack) {
  IndexedStream s;
  RecordingIndex idx(*s.reader);
  Decoded v = Decoder(idx.encodeBatch(*idx.batch(0, 0), false)).all();
  ASSERT_EQ(v.tag, 'D');
  ASSERT_EQ(v.keys, (std::vector<std::string>{"x", "rest"}));
  const Decoded& x = v.items[0];
  EXPECT_EQ(x.tag, 'X');
  EXPECT_EQ(x.s, "float32");
  EXPECT_EQ(x.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(x.requiresGrad);
  EXPECT_EQ(x.device, "cpu");
  EXPECT_EQ(x.bytes, bytesOf(s.images));  // bit for bit: -0.0 stays -0.0
  const Decoded& rest = v.items[1];
  ASSERT_EQ(rest.tag, 'T');
  ASSERT_EQ(rest.items.size(), 7u);
  EXPECT_EQ(rest.items[0].tag, 'N');
  EXPECT_EQ(rest.items[1].tag, 'B');
  EXPECT_EQ(rest.items[1].i, 1);
  EXPECT_EQ(rest.items[2].i, -5);
  EXPECT_EQ(rest.items[3].f, 0.25);
  EXPECT_EQ(rest.items[4].s, "label");
  EXPECT_EQ(rest.items[5].tag, 'Y');
  EXPECT_EQ(rest.items[5].s, std::string("\x09\x08\x07"));
  ASSERT_EQ(rest.items[6].tag, 'L');
  EXPECT_EQ(rest.items[6].items[0].i, 42);
}

TEST(RecordingIndex, ReadsSnapshotsAndKeptTensorsOnDemand) {
  IndexedStream s;
  RecordingIndex idx(*s.reader);
  Decoded snap = Decoder(idx.encodeSnapshot(0)).all();  // the periodic one
  ASSERT_EQ(snap.tag, 'X');
  EXPECT_EQ(snap.bytes, bytesOf(s.keptBytes));
  EXPECT_TRUE(idx.encodeSnapshot(1).empty());
  Decoded kept = Decoder(idx.encodeKeptTensors(0)).all();
  ASSERT_EQ(kept.tag, 'D');
  ASSERT_EQ(kept.keys, (std::vector<std::string>{"parameter:fc.weight#0.0"}));
  EXPECT_EQ(kept.items[0].bytes, bytesOf(s.keptBytes));
  Decoded none = Decoder(idx.encodeKeptTensors(1)).all();
  EXPECT_EQ(none.tag, 'D');
  EXPECT_TRUE(none.items.empty());
}

TEST(RecordingIndex, ABatchWithoutItsBytesIsAStandInOrAnError) {
  IndexedStream s;
  RecordingIndex idx(*s.reader);
  const RecordingIndex::Batch& b = *idx.batch(0, 1);
  EXPECT_THROW(idx.encodeBatch(b, false), TraceError);  // whole or nothing
  Decoded standIn = Decoder(idx.encodeBatch(b, true)).all();
  ASSERT_EQ(standIn.tag, 'X');
  EXPECT_EQ(standIn.bytes, std::vector<uint8_t>(16, 0));
}

TEST(RecordingIndex, ReadsTheSampleTraceAsTheReplayDid) {
  std::string root = testing::makeTempDir("rindexsample");
  testing::SampleOptions o;
  o.rich = true;
  o.nanAtStep = 2;
  testing::writeSampleTrace(root + "/t", o);
  {
    auto trace = Trace::open(root + "/t", OpenMode::Tolerant);
    RecordingIndex idx(*trace->mainStream());
    EXPECT_EQ(idx.recordedSteps(), 5);
    EXPECT_EQ(idx.batches().size(), 5u);
    for (int64_t step = 0; step < 5; ++step) {
      EXPECT_EQ(idx.batch(0, static_cast<uint64_t>(step))->eventStep, step);
      EXPECT_EQ(idx.digestsInStep(step), 1u);
      Decoded v = Decoder(idx.encodeBatch(*idx.batch(0, static_cast<uint64_t>(step)), false)).all();
      EXPECT_EQ(v.tag, 'D');
    }
    EXPECT_TRUE(std::isnan(*idx.loss(2)));
    ASSERT_NE(idx.launches(0), nullptr);
    EXPECT_EQ(idx.launches(0)->at(0).name, "void gemm_kernel<float>(...)");
    EXPECT_STREQ(idx.runtimeInfo("torch"), "1.13.1");
    EXPECT_EQ(idx.runtimeInfo("nothing"), nullptr);
    ASSERT_TRUE(idx.firstFailure());
    EXPECT_EQ(idx.firstFailure()->step, 2);
    Decoded kept = Decoder(idx.encodeKeptTensors(2)).all();
    EXPECT_EQ(kept.items.size(), 2u);
  }
  testing::removeTree(root);
}

// ---- ReplayVerifier, over the IndexedStream (step 0: digest "fc" 0xabc, loss 0.5).
DigestResult hashed(uint64_t h) {
  DigestResult d;
  d.hash = h;
  return d;
}
constexpr int kOut = static_cast<int>(schema::TensorDigest::Kind::MODULE_OUTPUT);

TEST(ReplayVerifier, AStepThatRecomputesEverythingIsVerified) {
  IndexedStream s;
  RecordingIndex idx(*s.reader);
  std::vector<std::string> warnings;
  ReplayVerifier v(&idx, -1, INT64_MAX, [&](const std::string& w) { warnings.push_back(w); });
  v.beginStep(0);
  EXPECT_EQ(v.openStep(), 0);
  EXPECT_EQ(v.checkDigest(0, kOut, "fc", 0, 0, 0, hashed(0xabc)), 0);
  EXPECT_EQ(v.checkDigest(0, kOut, "head", 0, 0, 0, hashed(0xabc)), 2);  // not recorded
  EXPECT_EQ(v.endStep(0, 0.5), 0);
  EXPECT_EQ(v.openStep(), INT64_MIN);
  ReplayVerifier::Figures f = v.figures();
  EXPECT_EQ(f.verifiedSteps, 1);
  EXPECT_EQ(f.lastStepEnded, 0);
  EXPECT_FALSE(f.divergence);
  // Step 1's end is not in the trace: nothing to check it against, never counted verified.
  v.beginStep(1);
  EXPECT_EQ(v.endStep(1, 0.5), 0);
  EXPECT_EQ(v.figures().verifiedSteps, 1);
  EXPECT_TRUE(warnings.empty());
}

TEST(ReplayVerifier, KeepsTheFirstDivergenceOnly) {
  IndexedStream s;
  RecordingIndex idx(*s.reader);
  ReplayVerifier v(&idx, -1, INT64_MAX, nullptr);
  v.beginStep(0);
  EXPECT_EQ(v.checkDigest(0, kOut, "fc", 0, 0, 0, hashed(0xdef)), 1);
  ASSERT_TRUE(v.divergence());
  EXPECT_EQ(v.divergence()->path, "fc");
  EXPECT_NE(v.divergence()->detail.find("module output fc (call 0, output 0): recorded hash 0x0000000000000abc"),
            std::string::npos)
      << v.divergence()->detail;
  EXPECT_EQ(v.endStep(0, 0.75), 1);  // the loss differs too: the first stays
  EXPECT_EQ(v.divergence()->path, "fc");
  v.diverge(Divergence{0, 0, "other", 0, 0, "later"});
  EXPECT_EQ(v.divergence()->path, "fc");
  EXPECT_EQ(v.figures().verifiedSteps, 0);
}

TEST(ReplayVerifier, ALossThatDiffersInItsBitsIsADivergence) {
  IndexedStream s;
  RecordingIndex idx(*s.reader);
  ReplayVerifier v(&idx, -1, INT64_MAX, nullptr);
  v.beginStep(0);
  EXPECT_EQ(v.checkDigest(0, kOut, "fc", 0, 0, 0, hashed(0xabc)), 0);
  EXPECT_EQ(v.endStep(0, std::nextafter(0.5, 1.0)), 1);
  ASSERT_TRUE(v.divergence());
  EXPECT_EQ(v.divergence()->path, "loss");
}

TEST(ReplayVerifier, AStepThatSkipsARecordedDigestTookAnotherPath) {
  IndexedStream s;
  RecordingIndex idx(*s.reader);
  ReplayVerifier v(&idx, -1, INT64_MAX, nullptr);
  v.beginStep(0);
  EXPECT_EQ(v.endStep(0, 0.5), 1);
  ASSERT_TRUE(v.divergence());
  EXPECT_NE(v.divergence()->detail.find("recomputed 0 of its 1 recorded digests"), std::string::npos);
}

TEST(ReplayVerifier, FastForwardedAndWhatIfStepsAreNotCompared) {
  IndexedStream s;
  RecordingIndex idx(*s.reader);
  ReplayVerifier jumped(&idx, 1, INT64_MAX, nullptr);
  jumped.beginStep(0);
  EXPECT_EQ(jumped.checkDigest(0, kOut, "fc", 0, 0, 0, hashed(0xdef)), 0);
  EXPECT_EQ(jumped.endStep(0, 9.0), 0);
  EXPECT_FALSE(jumped.divergence());
  EXPECT_EQ(jumped.figures().verifiedSteps, 0);
  ReplayVerifier changed(&idx, -1, 0, nullptr);
  changed.beginStep(0);
  EXPECT_EQ(changed.checkDigest(0, kOut, "fc", 0, 0, 0, hashed(0xdef)), 0);
  EXPECT_EQ(changed.endStep(0, 9.0), 0);
  EXPECT_FALSE(changed.divergence());
}

TEST(ReplayVerifier, DigestsOfAnotherAlgorithmAreNotComparedAndSaidOnce) {
  IndexedStream s;
  RecordingIndex idx(*s.reader);
  std::vector<std::string> warnings;
  ReplayVerifier v(&idx, -1, INT64_MAX, [&](const std::string& w) { warnings.push_back(w); });
  v.beginStep(0);
  EXPECT_EQ(v.checkDigest(0, kOut, "fc", 0, 0, 1, hashed(0xdef)), 2);
  EXPECT_EQ(v.checkDigest(0, kOut, "fc", 0, 0, 1, hashed(0xdef)), 2);
  EXPECT_FALSE(v.divergence());
  EXPECT_EQ(v.figures().incomparableDigests, 2u);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("recorded xxh3 (host), here deviceSum (GPU)"), std::string::npos);
}

TEST(ReplayVerifier, WithoutARecordingNothingIsInIt) {
  ReplayVerifier v(nullptr, -1, INT64_MAX, nullptr);
  v.beginStep(0);
  EXPECT_EQ(v.checkDigest(0, kOut, "fc", 0, 0, 0, hashed(1)), 2);
  EXPECT_EQ(v.checkCollectiveTensor(0, false, "float32", {1}, hashed(1), 0), 2);
  EXPECT_EQ(v.endStep(0, 1.0), 0);
  EXPECT_EQ(v.figures().verifiedSteps, 0);
}

// ---- ReplayReportWriter.
TEST(ReplayReportWriter, TheFirstRealStopSticksAndFactsAndWarningsAreWritten) {
  std::string root = testing::makeTempDir("rwriter");
  std::string path = root + "/report";
  testing::writeFile(path, {});  // dlreplay creates it: the library writes only over its own file
  ::setenv("DLRR_REPORT", path.c_str(), 1);
  ReplayReportWriter w;
  w.fact("warning", "from the hook");
  w.fact("no.such.fact", "x");
  w.warn("capped", 2);
  w.warn("dropped", 2);
  EXPECT_EQ(w.warnings().size(), 2u);
  w.fact("exception", "ValueError: bad");
  EXPECT_EQ(w.write("running", [](ReplayReport& r) { r.verifiedSteps = 1; }), "running");
  EXPECT_EQ(readReplayReportFile(path).verifiedSteps, 1);
  EXPECT_EQ(w.write("divergence", [](ReplayReport& r) { r.verifiedSteps = 2; }), "divergence");
  EXPECT_EQ(w.write("exit", [](ReplayReport& r) { r.verifiedSteps = 3; }), "divergence");
  ReplayReport r = readReplayReportFile(path);
  ::unsetenv("DLRR_REPORT");
  EXPECT_TRUE(r.attached);
  EXPECT_EQ(r.stop, ReplayReport::Stop::Divergence);
  EXPECT_EQ(r.verifiedSteps, 3);  // the latest figures
  ASSERT_TRUE(r.exception);
  EXPECT_EQ(*r.exception, "ValueError: bad");
  ASSERT_EQ(r.warnings.size(), 2u);
  EXPECT_EQ(r.warnings[0], "from the hook");
  EXPECT_NE(r.warnings[1].find("does not know: no.such.fact"), std::string::npos);
  testing::removeTree(root);
}

// ---- ReplaySession: recorded in this process (so the replay attaches), then replayed.
struct RecordedHere {
  RecordedHere() {
    root = testing::makeTempDir("rsession");
    Config c;
    c.mode = Mode::Record;
    c.traceDir = root + "/t";
    RecordSession rec(c);
    ProcessSession& s = rec;
    for (int64_t step = 0; step < 2; ++step) {
      s.stepBegin(step, 0, static_cast<uint64_t>(step), 0, StepRule::Batch);
      DigestResult out;
      s.digest(kOut, "fc", 0, 0, "float32", 1, kShape, values.data(), sizeof(float) * values.size(), false, out);
      s.stepEnd(step, 0.25 * static_cast<double>(step + 1));
    }
    rec.onExit(true, 0);
    report = root + "/report";
    testing::writeFile(report, {});
    ::setenv("DLRR_REPORT", report.c_str(), 1);
  }
  ~RecordedHere() {
    ::unsetenv("DLRR_REPORT");
    testing::removeTree(root);
  }
  Config replayConfig() const {
    Config c;
    c.mode = Mode::Replay;
    c.traceDir = root + "/t";
    return c;
  }
  static constexpr int64_t kShape[1] = {4};
  std::vector<float> values = {1, 2, 3, 4};
  std::string root, report;
};

TEST(ReplaySession, VerifiesWhatTheProcessRecomputesAndReportsIt) {
  RecordedHere r;
  ReplaySession rep(r.replayConfig(), "end");
  ASSERT_TRUE(rep.active());
  EXPECT_EQ(rep.recordedSteps(), 2);
  EXPECT_EQ(rep.recordedLoss(1), 0.5);
  for (int64_t step = 0; step < 2; ++step) {
    rep.stepBegin(step, 0, static_cast<uint64_t>(step), 0);
    DigestResult out;
    EXPECT_EQ(rep.digest(kOut, "fc", 0, 0, "float32", 1, RecordedHere::kShape, r.values.data(), 16, false, out), 0);
    rep.stepEnd(step, 0.25 * static_cast<double>(step + 1));  // writes the report so far
  }
  ReplayReport running = readReplayReportFile(r.report);
  EXPECT_EQ(running.stop, ReplayReport::Stop::Running);
  EXPECT_EQ(running.verifiedSteps, 2);
  EXPECT_EQ(running.recordedSteps, 2);
  EXPECT_EQ(running.lastStep, 1);
  EXPECT_FALSE(running.divergence);
  rep.writeReport("exit");
  EXPECT_EQ(readReplayReportFile(r.report).stop, ReplayReport::Stop::Exit);
}

TEST(ReplaySession, ADifferentValueIsTheDivergenceOfTheReport) {
  RecordedHere r;
  ReplaySession rep(r.replayConfig(), "end");
  ASSERT_TRUE(rep.active());
  rep.stepBegin(0, 0, 0, 0);
  std::vector<float> other = {1, 2, 3, 5};
  DigestResult out;
  EXPECT_EQ(rep.digest(kOut, "fc", 0, 0, "float32", 1, RecordedHere::kShape, other.data(), 16, false, out), 1);
  EXPECT_EQ(rep.digest(kOut, "head", 0, 0, "float32", 1, RecordedHere::kShape, other.data(), 16, false, out), 2);
  rep.stepEnd(0, 0.25);
  rep.writeReport("divergence");
  rep.writeReport("exit");  // the stop reason already given sticks
  ReplayReport rr = readReplayReportFile(r.report);
  EXPECT_EQ(rr.stop, ReplayReport::Stop::Divergence);
  EXPECT_EQ(rr.verifiedSteps, 0);
  ASSERT_TRUE(rr.divergence);
  EXPECT_EQ(rr.divergence->step, 0);
  EXPECT_EQ(rr.divergence->kind, "module output");
  EXPECT_EQ(rr.divergence->path, "fc");
}

TEST(ReplaySession, AnswersWhatTheRecordingDoesNotHold) {
  RecordedHere r;
  ReplaySession rep(r.replayConfig(), "end");
  ASSERT_TRUE(rep.active());
  std::vector<uint8_t> out = {1};
  EXPECT_FALSE(rep.batch(0, 0, ReplaySession::BatchBytes::Recorded, out));
  EXPECT_EQ(rep.batchKind(0, 0), 0);
  EXPECT_FALSE(rep.snapshot(0, out));
  EXPECT_FALSE(rep.rngAtStep(0, 0, 0, out));
  rep.recordedTensors(0, out);
  EXPECT_EQ(out, (std::vector<uint8_t>{'D', 0, 0, 0, 0}));  // an empty dict
  EXPECT_EQ(rep.recordedDigests(0).size(), 1u);
  EXPECT_TRUE(std::isnan(rep.recordedLoss(7)));
  EXPECT_EQ(rep.runtimeInfo("no.such.key"), nullptr);
}

}  // namespace
}  // namespace dlrr
