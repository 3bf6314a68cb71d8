// Bit rot: a flipped bit anywhere in a stream gives a clean TraceError or a recovery that
// agrees with the original on every step and blob it returns; never a wrong answer or a crash.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>

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
using testing::writeSampleTrace;

struct Outcome {
  bool opened = false;
  std::vector<StepInfo> steps;
  std::vector<std::pair<Hash128, std::vector<uint8_t>>> blobs;  // batch blobs read back
  std::vector<std::string> problems;
};

Outcome readAll(std::vector<uint8_t> bytes) {
  Outcome out;
  std::unique_ptr<StreamReader> r;
  try {
    r = StreamReader::openBytes(std::move(bytes), "p101");
  } catch (const TraceError&) {
    return out;
  }
  out.opened = true;
  StreamReader& s = *r;
  std::vector<std::unique_ptr<StreamReader>> v;
  v.push_back(std::move(r));
  auto t = Trace::fromStreams("mem", std::move(v));
  try {
    t->forEachStep(s, [&](const StepInfo& si) { out.steps.push_back(si); });
  } catch (const TraceError&) {  // best effort: the damage stops the walk: the steps before it are the result
  }
  try {
    std::vector<std::pair<Hash128, uint64_t>> refs;
    s.forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
      if (e.isBatch() && e.getBatch().getValue().isTuple()) {
        auto d = e.getBatch().getValue().getTuple()[0].getTensor().getData();
        refs.push_back({Hash128{d.getHashLo(), d.getHashHi()}, d.getSize()});
      }
    });
    for (const auto& [h, n] : refs) {
      try {
        out.blobs.push_back({h, s.readBlob(h, n)});
      } catch (const TraceError&) {  // best effort: an unreadable blob is left out of the result
      }
    }
  } catch (const TraceError&) {  // best effort: an unreadable stream yields what was read before
  }
  out.problems = s.verify();
  (void)t->summarize();
  return out;
}

TEST(Corruption, AFlippedBitAnywhereNeverGivesAWrongAnswer) {
  std::string root = makeTempDir("bitflip");
  testing::SampleOptions o;
  o.steps = 4;
  o.batchFloats = 64;
  auto res = writeSampleTrace(root + "/t", o);
  const auto original = readFile(root + "/t/" + res.processStream);
  const Outcome good = readAll(original);
  ASSERT_TRUE(good.opened);
  ASSERT_EQ(good.steps.size(), 4u);
  ASSERT_EQ(good.blobs.size(), 4u);
  ASSERT_TRUE(good.problems.empty());

  // Bytes no checksum covers: the file header's minor version and reserved word, and the
  // trailer's reserved word. A flip there changes nothing a reader returns.
  auto unchecked = [&](size_t i) { return (i >= 10 && i < kFileHeaderSize) || i >= original.size() - 4; };
  size_t trials = 0, refused = 0, partial = 0;
  for (size_t i = 0; i < original.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      if (i >= 256 && bit != static_cast<int>(i % 8)) continue;  // every bit of the headers, one per byte after
      auto bytes = original;
      bytes[i] ^= static_cast<uint8_t>(1u << bit);
      SCOPED_TRACE("byte " + std::to_string(i) + " bit " + std::to_string(bit));
      Outcome got;
      try {
        got = readAll(std::move(bytes));
      } catch (...) {
        ADD_FAILURE() << "something other than TraceError escaped";
        continue;
      }
      ++trials;
      if (!got.opened) {
        ++refused;
        continue;
      }
      ASSERT_LE(got.steps.size(), good.steps.size());
      for (size_t k = 0; k < got.steps.size(); ++k) {
        EXPECT_EQ(got.steps[k].step, good.steps[k].step);
        EXPECT_EQ(std::bit_cast<uint64_t>(got.steps[k].loss), std::bit_cast<uint64_t>(good.steps[k].loss));  // NaN too
        EXPECT_EQ(got.steps[k].digestFingerprint, good.steps[k].digestFingerprint);
        EXPECT_EQ(got.steps[k].batchBytes, good.steps[k].batchBytes);
      }
      for (const auto& [h, data] : got.blobs) {
        bool matches = false;
        for (const auto& [gh, gdata] : good.blobs) matches |= gh == h && gdata == data;
        EXPECT_TRUE(matches) << "a blob read back differs from the original";
      }
      if (got.steps.size() < good.steps.size() || got.blobs.size() < good.blobs.size()) ++partial;
      if (!unchecked(i)) {
        EXPECT_FALSE(got.problems.empty()) << "verify missed the flip";
      }
    }
  }
  EXPECT_GT(trials, original.size());
  EXPECT_GT(refused, 0u);
  EXPECT_GT(partial, 0u);
  removeTree(root);
}

}  // namespace
}  // namespace dlrr
