// libFuzzer target: what dlreplay does with the batches of an untrusted trace. A stream
// file's bytes (checksums repaired, as in fuzz_stream_reader) are opened; every Batch value
// goes through encodeValue (replayer/BatchEncoding) with blobs loaded by the
// reader, and the result must parse under the encoding's grammar, exactly as the Python
// hook's decoder (pyhook/python/dlrr_hook/batches.py) walks it. Only TraceError may come
// out; a crash, a sanitizer report, an unbounded allocation or an encoding that does not
// parse is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "format/Crc32c.h"
#include "format/Frame.h"
#include "format/StreamReader.h"
#include "format/TraceError.h"
#include "replayer/BatchEncoding.h"

namespace {

constexpr size_t kMaxValues = 32;

// The grammar of replayer/BatchEncoding.h; aborts (a finding) when `b` does not follow it.
class Checker {
 public:
  Checker(const std::vector<uint8_t>& b) : b_(b) {}
  void all() {
    value(0);
    if (pos_ != b_.size()) std::abort();
  }

 private:
  void need(size_t n) {
    if (n > b_.size() - pos_) std::abort();
  }
  uint64_t le(size_t n) {
    need(n);
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(b_[pos_ + i]) << (8 * i);
    pos_ += n;
    return v;
  }
  void str() { skip(le(4)); }
  void skip(uint64_t n) {
    need(static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
  }
  void value(int depth) {
    if (depth > 65) std::abort();
    switch (static_cast<char>(le(1))) {
      case 'N':
        return;
      case 'B':
        skip(1);
        return;
      case 'I':
      case 'F':
        skip(8);
        return;
      case 'S':
      case 'Y':
      case 'O':
        str();
        return;
      case 'L':
      case 'T': {
        uint64_t n = le(4);
        for (uint64_t i = 0; i < n; ++i) value(depth + 1);
        return;
      }
      case 'D': {
        uint64_t n = le(4);
        for (uint64_t i = 0; i < n; ++i) {
          str();
          value(depth + 1);
        }
        return;
      }
      case 'X': {
        str();
        uint64_t ndim = le(4);
        skip(8 * ndim);
        skip(1);
        str();
        skip(le(8));
        return;
      }
      default:
        std::abort();
    }
  }
  const std::vector<uint8_t>& b_;
  size_t pos_ = 0;
};

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
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  repairChecksums(bytes);
  try {
    auto s = dlrr::StreamReader::openBytes(std::move(bytes), "fuzz");
    dlrr::BlobLoader load = [&](const dlrr::Hash128& h, uint64_t n) { return s->readBlob(h, n); };
    size_t seen = 0;
    s->forEachEventUntil([&](dlrr::schema::Event::Reader e, const dlrr::FrameInfo&) {
      if (!e.isBatch()) return true;
      dlrr::schema::Value::Reader v = e.getBatch().getValue();
      std::vector<uint8_t> out;
      try {
        dlrr::encodeValue(v, load, out);
      } catch (const dlrr::TraceError&) {
        return ++seen < kMaxValues;
      }
      Checker(out).all();
      return ++seen < kMaxValues;
    });
  } catch (const dlrr::TraceError&) {
  }
  return 0;
}
