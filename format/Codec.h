#pragma once
// Payload codecs: optional byte-shuffle (transpose bytes by element size, which groups the
// slowly-varying exponent bytes of floats) followed by zstd. bench/format_bench measures
// what each buys; docs/performance.md has the figures.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "format/Frame.h"

struct ZSTD_CCtx_s;
struct ZSTD_DCtx_s;

namespace dlrr {

void byteShuffle(const uint8_t* in, size_t n, size_t elem, uint8_t* out) noexcept;
void byteUnshuffle(const uint8_t* in, size_t n, size_t elem, uint8_t* out) noexcept;

// Holds zstd contexts; one per thread that compresses (contexts are not thread-safe).
class PayloadCodec {
 public:
  explicit PayloadCodec(int level = 1);
  ~PayloadCodec();
  PayloadCodec(const PayloadCodec&) = delete;
  PayloadCodec& operator=(const PayloadCodec&) = delete;

  // Appends the encoded form of raw[0..n) to `out` and returns the codec used: `wanted`, or
  // None when compression would not shrink the data.
  Codec encode(const uint8_t* raw, size_t n, Codec wanted, std::vector<uint8_t>& out) {
    return encode(raw, n, wanted, out, level_);
  }
  // The same at another zstd level (any level decodes alike).
  Codec encode(const uint8_t* raw, size_t n, Codec wanted, std::vector<uint8_t>& out, int level);
  // Decodes exactly rawLen bytes into `out` (resized). Throws TraceError(Corrupt) on bad data.
  void decode(Codec codec, const uint8_t* stored, size_t storedLen, size_t rawLen, std::vector<uint8_t>& out);

 private:
  struct CDeleter {
    void operator()(ZSTD_CCtx_s* c) const noexcept;
  };
  struct DDeleter {
    void operator()(ZSTD_DCtx_s* d) const noexcept;
  };
  int level_;
  std::unique_ptr<ZSTD_CCtx_s, CDeleter> cctx_;
  std::unique_ptr<ZSTD_DCtx_s, DDeleter> dctx_;
  std::vector<uint8_t> scratch_;
};

}  // namespace dlrr
