// Crash recovery: a stream cut at any byte opens (once its header frame is complete) and
// yields exactly the steps whose commit ended before the cut; crashed and concatenated
// streams are read as far as they are intact, and say why they stop.
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cstring>
#include <set>

#include "format/Frame.h"
#include "format/StreamReader.h"
#include "format/Trace.h"
#include "format/TraceError.h"
#include "support/SampleTrace.h"

namespace dlrr {
namespace {

using testing::makeTempDir;
using testing::readFile;
using testing::removeTree;
using testing::writeFile;
using testing::writeSampleTrace;

bool sameStep(const StepInfo& a, const StepInfo& b) {
  return a.step == b.step && std::bit_cast<uint64_t>(a.loss) == std::bit_cast<uint64_t>(b.loss) &&
         a.nonFinite == b.nonFinite && a.batchBytes == b.batchBytes && a.digests == b.digests &&
         a.digestFingerprint == b.digestFingerprint;
}

// Steps of a stream read from memory, plus the error that stopped the read, if any.
struct ReadResult {
  bool opened = false;
  std::string openError;
  std::vector<StepInfo> steps;
  std::string readError;
  StreamStatus status;
};

ReadResult readSteps(std::vector<uint8_t> bytes) {
  ReadResult res;
  std::unique_ptr<StreamReader> r;
  try {
    r = StreamReader::openBytes(std::move(bytes), "p101");
  } catch (const TraceError& e) {
    res.openError = e.what();
    return res;
  }
  res.opened = true;
  std::vector<std::unique_ptr<StreamReader>> streams;
  streams.push_back(std::move(r));
  auto t = Trace::fromStreams("mem", std::move(streams));
  try {
    t->forEachStep(*t->streams()[0], [&](const StepInfo& si) { res.steps.push_back(si); });
  } catch (const TraceError& e) {
    res.readError = e.what();
  }
  res.status = t->streams()[0]->status();
  return res;
}

struct Sample {
  std::string root;
  testing::SampleResult result;
  std::vector<uint8_t> bytes;  // the process stream
  std::vector<StepInfo> steps;
  std::set<uint64_t> boundaries;  // offsets where a frame (or the trailer) starts or the file ends
  uint64_t headerFrameEnd = 0;
  ~Sample() { removeTree(root); }
};

std::unique_ptr<Sample> makeSample(const testing::SampleOptions& o) {
  auto s = std::make_unique<Sample>();
  s->root = makeTempDir("recovery");
  s->result = writeSampleTrace(s->root + "/t", o);
  s->bytes = readFile(s->root + "/t/" + s->result.processStream);
  auto r = StreamReader::openBytes(s->bytes, "p101");
  for (const auto& f : r->frames()) {
    s->boundaries.insert(f.offset);
    s->boundaries.insert(f.offset + kFrameHeaderSize + f.header.storedLen);
  }
  s->headerFrameEnd = r->frames().front().offset + kFrameHeaderSize + r->frames().front().header.storedLen;
  s->boundaries.insert(s->bytes.size());
  if (r->status().cleanClose) {  // the footer frame and the trailer are not in frames()
    auto footer = decodeTrailer(s->bytes.data() + s->bytes.size() - kTrailerSize);
    EXPECT_TRUE(footer);
    if (footer) s->boundaries.insert(*footer);
    s->boundaries.insert(s->bytes.size() - kTrailerSize);
  }
  auto all = readSteps(s->bytes);
  s->steps = all.steps;
  EXPECT_EQ(all.readError, "");
  return s;
}

TEST(Recovery, TruncationAtEveryByteRecoversExactlyTheCommittedSteps) {
  testing::SampleOptions o;
  o.steps = 5;
  auto s = makeSample(o);
  ASSERT_EQ(s->steps.size(), 5u);
  ASSERT_EQ(s->result.stepEndOffsets.size(), 5u);
  for (size_t cut = 0; cut <= s->bytes.size(); ++cut) {
    SCOPED_TRACE("cut at " + std::to_string(cut) + " of " + std::to_string(s->bytes.size()));
    std::vector<uint8_t> prefix(s->bytes.begin(), s->bytes.begin() + static_cast<long>(cut));
    ReadResult r;
    try {
      r = readSteps(std::move(prefix));
    } catch (...) {
      ADD_FAILURE() << "something other than TraceError escaped";
      continue;
    }
    if (cut < s->headerFrameEnd) {
      EXPECT_FALSE(r.opened);  // without its header frame a stream is not usable
      // ... but a stream cut while its writer created it is torn (recovered, nothing in it).
      std::vector<uint8_t> head(s->bytes.begin(), s->bytes.begin() + static_cast<long>(cut));
      try {
        StreamReader::openBytes(std::move(head), "p101");
      } catch (const TraceError& e) {
        EXPECT_TRUE(e.torn()) << e.what();
      }
      continue;
    }
    ASSERT_TRUE(r.opened) << r.openError;
    EXPECT_EQ(r.readError, "");
    size_t committed = 0;
    for (uint64_t end : s->result.stepEndOffsets) committed += end <= cut;
    ASSERT_EQ(r.steps.size(), committed);
    for (size_t i = 0; i < committed; ++i) EXPECT_TRUE(sameStep(r.steps[i], s->steps[i])) << "step " << i;
    if (cut < s->bytes.size()) {
      EXPECT_FALSE(r.status.cleanClose);
      // A cut inside a frame is reported; a cut between frames is what a crash leaves.
      if (!s->boundaries.count(cut)) {
        EXPECT_NE(r.status.damage, "");
      }
      // Whatever the cut, it is what a writer stopped there leaves: a torn tail at most, never
      // damage (dltrace verify accepts it).
      EXPECT_TRUE(r.status.damage.empty() || r.status.torn) << r.status.damage;
      auto reader = StreamReader::openBytes(
          std::vector<uint8_t>(s->bytes.begin(), s->bytes.begin() + static_cast<long>(cut)), "p101");
      auto problems = reader->verify();
      EXPECT_TRUE(problems.empty()) << problems.front();
    } else {
      EXPECT_TRUE(r.status.cleanClose);
    }
  }
}

TEST(Recovery, TruncatedFilesOnDiskOpenThroughTrace) {
  auto s = makeSample({});
  std::string copy = s->root + "/cut";
  for (size_t cut = s->headerFrameEnd; cut <= s->bytes.size(); cut += 97) {
    removeTree(copy);
    std::string launcher = s->root + "/t/launcher.dls";
    ASSERT_EQ(::mkdir(copy.c_str(), 0700), 0);
    writeFile(copy + "/launcher.dls", readFile(launcher));
    writeFile(copy + "/" + s->result.processStream,
              std::vector<uint8_t>(s->bytes.begin(), s->bytes.begin() + static_cast<long>(cut)));
    auto t = Trace::open(copy);
    size_t committed = 0;
    for (uint64_t end : s->result.stepEndOffsets) committed += end <= cut;
    EXPECT_EQ(t->steps(*t->mainStream()).size(), committed) << "cut " << cut;
    EXPECT_EQ(t->summarize().steps, committed);
  }
}

TEST(Recovery, CrashedTraceOpensByScanningAndItsStepIndexWorks) {
  std::string root = makeTempDir("crashed");
  testing::SampleOptions o;
  o.steps = 8;
  o.closeCleanly = false;
  auto res = writeSampleTrace(root + "/t", o);
  auto t = Trace::open(root + "/t");
  StreamReader* s = t->find("p101");
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(s->status().cleanClose);
  EXPECT_EQ(s->status().damage, "");
  EXPECT_EQ(t->summarize().steps, 8u);
  EXPECT_FALSE(t->summarize().exitCode.has_value() && t->summarize().processes[1].exitCode.has_value());
  for (int step = 0; step < 8; ++step) {
    auto off = s->stepFrameOffset(step);
    ASSERT_TRUE(off) << step;
    bool found = false;
    s->forEachEventUntil(
        [&](schema::Event::Reader e, const FrameInfo& f) {
          if (f.offset != *off) return false;
          found |= e.isStepBegin() && e.getStepBegin().getStep() == step;
          return true;
        },
        *off);
    EXPECT_TRUE(found) << "step " << step;
  }
  EXPECT_FALSE(s->stepFrameOffset(8));
  EXPECT_TRUE(s->verify().empty());
  removeTree(root);
}

TEST(Recovery, StepIndexOfADamagedCrashedStreamKeepsTheStepsBeforeTheDamage) {
  testing::SampleOptions o;
  o.steps = 6;
  o.closeCleanly = false;
  auto s = makeSample(o);
  // Corrupt the payload of the events frame that commits step 4.
  auto r0 = StreamReader::openBytes(s->bytes, "p101");
  uint64_t victim = 0;
  for (const auto& f : r0->frames())
    if (f.header.kind == FrameKind::Events && f.offset < s->result.stepEndOffsets[4] &&
        f.offset >= s->result.stepEndOffsets[3])
      victim = f.offset;
  ASSERT_NE(victim, 0u);
  auto bytes = s->bytes;
  bytes[victim + kFrameHeaderSize + 2] ^= 0x10;
  auto r = StreamReader::openBytes(bytes, "p101");
  for (int step = 0; step < 4; ++step) EXPECT_TRUE(r->stepFrameOffset(step)) << step;
  EXPECT_FALSE(r->stepFrameOffset(5));
  EXPECT_FALSE(r->verify().empty());
}

TEST(Recovery, ConcatenatedStreamsAreDetected) {
  auto s = makeSample({});
  auto twice = s->bytes;
  twice.insert(twice.end(), s->bytes.begin(), s->bytes.end());
  auto r = StreamReader::openBytes(twice, "p101");
  EXPECT_FALSE(r->status().cleanClose);
  EXPECT_NE(r->status().damage.find("concatenated"), std::string::npos) << r->status().damage;
  EXPECT_FALSE(r->verify().empty());
  auto steps = readSteps(twice).steps;
  ASSERT_EQ(steps.size(), s->steps.size());  // the first copy is still read

  // A crashed stream (no footer) followed by another stream: the second file header is named.
  testing::SampleOptions o;
  o.closeCleanly = false;
  auto crashed = makeSample(o);
  auto joined = crashed->bytes;
  joined.insert(joined.end(), s->bytes.begin(), s->bytes.end());
  auto r2 = StreamReader::openBytes(joined, "p101");
  EXPECT_NE(r2->status().damage.find("second file header"), std::string::npos) << r2->status().damage;
}

TEST(Recovery, FooterWithoutTrailerIsReadByScanningAndReported) {
  // Killed between the footer frame and the trailer (kill -9 during close): a torn tail.
  auto s = makeSample({});
  auto bytes = s->bytes;
  bytes.resize(bytes.size() - kTrailerSize);
  auto r = StreamReader::openBytes(bytes, "p101");
  EXPECT_FALSE(r->status().cleanClose);
  EXPECT_TRUE(r->status().torn);
  EXPECT_NE(r->status().damage.find("no trailer"), std::string::npos) << r->status().damage;
  EXPECT_EQ(readSteps(bytes).steps.size(), s->steps.size());
  EXPECT_TRUE(r->verify().empty());

  // A whole trailer that does not check out is damage, not a crash.
  auto bad = s->bytes;
  bad[bad.size() - 6] ^= 0x40;  // inside the trailer's CRC
  auto r2 = StreamReader::openBytes(bad, "p101");
  EXPECT_FALSE(r2->status().cleanClose);
  EXPECT_FALSE(r2->status().torn);
  auto problems = r2->verify();
  ASSERT_FALSE(problems.empty());
  bool named = false;
  for (const auto& p : problems) named |= p.find("footer") != std::string::npos;
  EXPECT_TRUE(named) << problems.front();
  EXPECT_EQ(readSteps(bad).steps.size(), s->steps.size());
}

TEST(Recovery, ATornTailIsRecoveredButWrongBytesAreDamage) {
  testing::SampleOptions o;
  o.steps = 4;
  o.closeCleanly = false;
  auto s = makeSample(o);
  // Torn: a frame cut anywhere, the partial header of the next frame.
  auto cut = s->bytes;
  cut.resize(cut.size() - 5);
  auto r = StreamReader::openBytes(cut, "p101");
  EXPECT_TRUE(r->status().torn);
  EXPECT_TRUE(r->verify().empty());
  auto partial = s->bytes;
  partial.insert(partial.end(), {0x44, 0x4C, 0x52});  // "DLR": the start of a frame magic
  EXPECT_TRUE(StreamReader::openBytes(partial, "p101")->verify().empty());
  // Damage: junk after the last frame, a bit flipped in the last frame, junk of a whole header.
  auto junk = s->bytes;
  junk.insert(junk.end(), {'j', 'u', 'n', 'k', '!'});
  auto rj = StreamReader::openBytes(junk, "p101");
  EXPECT_FALSE(rj->status().torn);
  EXPECT_FALSE(rj->verify().empty());
  auto flip = s->bytes;
  flip[flip.size() - 3] ^= 1;
  EXPECT_FALSE(StreamReader::openBytes(flip, "p101")->verify().empty());
  auto big = s->bytes;
  big.insert(big.end(), 40, 0xAB);
  auto rb = StreamReader::openBytes(big, "p101");
  EXPECT_FALSE(rb->status().torn);
  EXPECT_FALSE(rb->verify().empty());
  // Torn at birth: nothing but (part of) the file header, or a header frame cut short.
  for (size_t n : {size_t{0}, size_t{5}, size_t{16}, size_t{20}, s->headerFrameEnd - 1}) {
    try {
      StreamReader::openBytes(std::vector<uint8_t>(s->bytes.begin(), s->bytes.begin() + static_cast<long>(n)), "p101");
      ADD_FAILURE() << n;
    } catch (const TraceError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Corrupt) << n;
      EXPECT_TRUE(e.torn()) << n << ": " << e.what();
    }
  }
  auto hdrJunk = std::vector<uint8_t>(s->bytes.begin(), s->bytes.begin() + 16);
  hdrJunk.insert(hdrJunk.end(), {'x', 'y', 'z'});
  try {
    StreamReader::openBytes(hdrJunk, "p101");
    ADD_FAILURE();
  } catch (const TraceError& e) {
    EXPECT_FALSE(e.torn()) << e.what();
  }
}

TEST(Recovery, AnEmptyStreamFileIsTornNotForeign) {
  try {
    StreamReader::openBytes({}, "p1");
    FAIL() << "opened an empty stream";
  } catch (const TraceError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Corrupt);
  }
  try {
    StreamReader::openBytes({'h', 'e', 'l', 'l', 'o'}, "p1");
    FAIL() << "opened a foreign file";
  } catch (const TraceError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::NotATrace);
  }
}

TEST(Recovery, TolerantOpenSkipsUnreadableStreams) {
  std::string root = makeTempDir("tolerant");
  writeSampleTrace(root + "/t");
  writeFile(root + "/t/p999.dls", {});  // a writer that died before its first byte
  EXPECT_THROW(Trace::open(root + "/t"), TraceError);
  auto t = Trace::open(root + "/t", OpenMode::Tolerant);
  ASSERT_EQ(t->broken().size(), 1u);
  EXPECT_EQ(t->broken()[0].name, "p999");
  EXPECT_EQ(t->broken()[0].kind, ErrorKind::Corrupt);
  auto sum = t->summarize();
  EXPECT_EQ(sum.steps, 5u);
  EXPECT_EQ(sum.broken.size(), 1u);
  removeTree(root);
}

}  // namespace
}  // namespace dlrr
