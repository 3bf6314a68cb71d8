#include "format/Codec.h"

#include <zstd.h>

#include <cstring>

#include "format/TraceError.h"

namespace dlrr {

void byteShuffle(const uint8_t* in, size_t n, size_t elem, uint8_t* out) noexcept {
  size_t count = n / elem;
  for (size_t b = 0; b < elem; ++b) {
    uint8_t* dst = out + b * count;
    for (size_t i = 0; i < count; ++i) dst[i] = in[i * elem + b];
  }
  std::memcpy(out + count * elem, in + count * elem, n - count * elem);
}

void byteUnshuffle(const uint8_t* in, size_t n, size_t elem, uint8_t* out) noexcept {
  size_t count = n / elem;
  for (size_t b = 0; b < elem; ++b) {
    const uint8_t* src = in + b * count;
    for (size_t i = 0; i < count; ++i) out[i * elem + b] = src[i];
  }
  std::memcpy(out + count * elem, in + count * elem, n - count * elem);
}

void PayloadCodec::CDeleter::operator()(ZSTD_CCtx_s* c) const noexcept { ZSTD_freeCCtx(c); }
void PayloadCodec::DDeleter::operator()(ZSTD_DCtx_s* d) const noexcept { ZSTD_freeDCtx(d); }

PayloadCodec::PayloadCodec(int level) : level_(level), cctx_(ZSTD_createCCtx()), dctx_(ZSTD_createDCtx()) {}
PayloadCodec::~PayloadCodec() = default;

Codec PayloadCodec::encode(const uint8_t* raw, size_t n, Codec wanted, std::vector<uint8_t>& out) {
  if (wanted.compression == Compression::None || n == 0) {
    out.insert(out.end(), raw, raw + n);
    return Codec{};
  }
  const uint8_t* src = raw;
  if (wanted.shuffle > 1 && n >= wanted.shuffle) {
    scratch_.resize(n);
    byteShuffle(raw, n, wanted.shuffle, scratch_.data());
    src = scratch_.data();
  } else {
    wanted.shuffle = 0;
  }
  size_t base = out.size();
  size_t bound = ZSTD_compressBound(n);
  out.resize(base + bound);
  size_t got = ZSTD_compressCCtx(cctx_.get(), out.data() + base, bound, src, n, level_);
  if (ZSTD_isError(got) || got >= n) {  // incompressible (or zstd failed): store raw
    out.resize(base);
    out.insert(out.end(), raw, raw + n);
    return Codec{};
  }
  out.resize(base + got);
  return wanted;
}

void PayloadCodec::decode(Codec codec, const uint8_t* stored, size_t storedLen, size_t rawLen,
                          std::vector<uint8_t>& out) {
  // Check the lengths before allocating: a lie here is corruption, not a reason to allocate.
  if (codec.compression == Compression::None) {
    if (storedLen != rawLen) throw TraceError(ErrorKind::Corrupt, "stored and raw lengths differ in an uncompressed frame");
    out.resize(rawLen);
    if (rawLen) std::memcpy(out.data(), stored, rawLen);
    return;
  }
  unsigned long long declared = ZSTD_getFrameContentSize(stored, storedLen);
  if (declared != rawLen) throw TraceError(ErrorKind::Corrupt, "compressed payload size does not match its frame header");
  out.resize(rawLen);
  uint8_t* dst = out.data();
  if (codec.shuffle > 1) {
    scratch_.resize(rawLen);
    dst = scratch_.data();
  }
  size_t got = ZSTD_decompressDCtx(dctx_.get(), dst, rawLen, stored, storedLen);
  if (ZSTD_isError(got) || got != rawLen) throw TraceError(ErrorKind::Corrupt, "compressed payload does not decode");
  if (codec.shuffle > 1) byteUnshuffle(scratch_.data(), rawLen, codec.shuffle, out.data());
}

}  // namespace dlrr
