// libFuzzer target: a stream file's bytes, straight from the fuzzer, through everything a
// reader does with them (open, frame scan, events, blobs, step index, verify, summary) and
// through dltrace's event formatting. Only TraceError may come out; anything else (a
// kj::Exception, a crash, a sanitizer report, a huge allocation) is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "format/Crc32c.h"
#include "format/Frame.h"
#include "format/StreamReader.h"
#include "format/Trace.h"
#include "format/TraceError.h"
#ifdef DLRR_FUZZ_TOOLS
#include "tools/common/Json.h"
#include "tools/dltrace/EventText.h"
#include "triage/Classifier.h"
#include "triage/Environment.h"
#include "triage/TraceFacts.h"
#endif

namespace {

using dlrr::FrameInfo;
using dlrr::Hash128;
using dlrr::schema::Event;
using dlrr::schema::Value;

constexpr size_t kMaxBlobReads = 16;

void collectTensors(Value::Reader v, std::vector<std::pair<Hash128, uint64_t>>& out) {
  switch (v.which()) {
    case Value::TENSOR: {
      auto d = v.getTensor().getData();
      out.push_back({Hash128{d.getHashLo(), d.getHashHi()}, d.getSize()});
      return;
    }
    case Value::LIST:
      for (auto c : v.getList()) collectTensors(c, out);
      return;
    case Value::TUPLE:
      for (auto c : v.getTuple()) collectTensors(c, out);
      return;
    case Value::DICT:
      for (auto c : v.getDict()) collectTensors(c.getValue(), out);
      return;
    default:
      return;
  }
}

void exercise(dlrr::StreamReader& s) {
  (void)s.header().getStreamName();
  (void)s.frames();
  std::vector<std::pair<Hash128, uint64_t>> blobs;
  std::string sink;
  try {
    s.forEachEvent([&](Event::Reader e, const FrameInfo&) {
#ifdef DLRR_FUZZ_TOOLS
      dlrr::tools::InternTable names;
      sink = dlrr::tools::describeEvent(e, names);
      for (const auto& l : dlrr::tools::eventDetailLines(e)) sink += l;
      sink.clear();
      dlrr::tools::JsonWriter j(sink);
      dlrr::tools::eventJson(j, e);
#endif
      if (e.isRngState()) {
        auto r = e.getRngState().getState();
        blobs.push_back({Hash128{r.getHashLo(), r.getHashHi()}, r.getSize()});
      }
      if (e.isBatch()) collectTensors(e.getBatch().getValue(), blobs);
      if (e.isTensor()) {
        auto d = e.getTensor().getTensor().getData();
        blobs.push_back({Hash128{d.getHashLo(), d.getHashHi()}, d.getSize()});
      }
    });
  } catch (const dlrr::TraceError&) {
  }
  for (size_t i = 0; i < blobs.size() && i < kMaxBlobReads; ++i) {
    try {
      if (s.hasBlob(blobs[i].first)) (void)s.readBlob(blobs[i].first, blobs[i].second);
    } catch (const dlrr::TraceError&) {
    }
  }
  for (int64_t step : {-1, 0, 1, 3}) {
    try {
      if (auto off = s.stepFrameOffset(step))
        s.forEachEventUntil([&](Event::Reader e, const FrameInfo&) { return e.getStep() <= step; }, *off);
    } catch (const dlrr::TraceError&) {
    }
  }
  (void)s.verify();
}

// Recomputes every frame's CRCs (and the trailer's) in place. Random mutations almost never
// keep a CRC32C valid, so without this pass the fuzzer would rarely get past the checksums
// to the decoders and Cap'n Proto readers behind them.
void repairChecksums(std::vector<uint8_t>& b) {
  auto get32 = [&](size_t at) {
    return static_cast<uint32_t>(b[at]) | static_cast<uint32_t>(b[at + 1]) << 8 |
           static_cast<uint32_t>(b[at + 2]) << 16 | static_cast<uint32_t>(b[at + 3]) << 24;
  };
  auto put32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) b[at + static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
  };
  size_t off = dlrr::kFileHeaderSize;
  while (off + dlrr::kFrameHeaderSize <= b.size()) {
    uint32_t stored = get32(off + 16);
    if (stored > b.size() - off - dlrr::kFrameHeaderSize) break;
    put32(off + 24, dlrr::crc32c(b.data() + off + dlrr::kFrameHeaderSize, stored));
    put32(off + 28, dlrr::crc32c(b.data() + off, 28));
    off += dlrr::kFrameHeaderSize + stored;
  }
  if (b.size() >= dlrr::kTrailerSize)
    put32(b.size() - dlrr::kTrailerSize + 16, dlrr::crc32c(b.data() + b.size() - dlrr::kTrailerSize, 16));
}

void runOne(std::vector<uint8_t> bytes) {
  try {
    auto reader = dlrr::StreamReader::openBytes(std::move(bytes), "fuzz");
    exercise(*reader);
    std::vector<std::unique_ptr<dlrr::StreamReader>> streams;
    streams.push_back(std::move(reader));
    auto trace = dlrr::Trace::fromStreams("fuzz", std::move(streams));
    (void)trace->summarize();
    try {
      (void)trace->steps(*trace->streams().front());
    } catch (const dlrr::TraceError&) {
    }
#ifdef DLRR_FUZZ_TOOLS
    // dltrace triage / env over untrusted bytes.
    try {
      auto facts = dlrr::triage::gatherFacts(*trace);
      (void)dlrr::triage::classify(facts);
      (void)dlrr::triage::recordedEnvironment(*trace, facts);
    } catch (const dlrr::TraceError&) {
    }
#endif
  } catch (const dlrr::TraceError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  runOne(bytes);  // as given: the checksums' own path
  repairChecksums(bytes);
  runOne(std::move(bytes));  // checksums made valid: the decoders and readers behind them
  return 0;
}
