#include "format/Codec.h"

#include <zstd.h>

#include <bit>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "format/Check.h"
#include "format/TraceError.h"

namespace dlrr {

namespace {

// The byte loops below were the only code for every element size: ~0.5 GB/s on float32,
// which made the shuffle cost as much as zstd itself on the writer thread. Element sizes 2
// and 4 (half floats, float32) now move 16 elements per iteration with SSE2 (part of the
// x86-64 baseline), size 8 (float64, int64) as an 8x8 byte transpose in 64-bit registers;
// the byte loops remain for the tails, other sizes and other architectures. The layout is
// unchanged: plane b holds byte b of every element, in element order; tail bytes that make
// no whole element stay at the end.

void shuffleBytes(const uint8_t* in, size_t count, size_t elem, size_t from, uint8_t* out) noexcept {
  for (size_t b = 0; b < elem; ++b) {
    uint8_t* dst = out + b * count;
    for (size_t i = from; i < count; ++i) dst[i] = in[i * elem + b];
  }
}

void unshuffleBytes(const uint8_t* in, size_t count, size_t elem, size_t from, uint8_t* out) noexcept {
  for (size_t b = 0; b < elem; ++b) {
    const uint8_t* src = in + b * count;
    for (size_t i = from; i < count; ++i) out[i * elem + b] = src[i];
  }
}

// Transposes the 8x8 byte matrix held in w[0..7] (byte j of w[i] <-> byte i of w[j]).
inline void transpose8x8(uint64_t w[8]) noexcept {
  for (int i = 0; i < 4; ++i) {
    uint64_t t = ((w[i] >> 32) ^ w[i + 4]) & 0x00000000FFFFFFFFull;
    w[i] ^= t << 32;
    w[i + 4] ^= t;
  }
  for (int i : {0, 1, 4, 5}) {
    uint64_t t = ((w[i] >> 16) ^ w[i + 2]) & 0x0000FFFF0000FFFFull;
    w[i] ^= t << 16;
    w[i + 2] ^= t;
  }
  for (int i : {0, 2, 4, 6}) {
    uint64_t t = ((w[i] >> 8) ^ w[i + 1]) & 0x00FF00FF00FF00FFull;
    w[i] ^= t << 8;
    w[i + 1] ^= t;
  }
}

// Little-endian loads and stores: byte k of a word is byte k in memory.
static_assert(std::endian::native == std::endian::little, "the 8-byte transpose assumes little-endian words");

// Returns how many leading elements it shuffled (a multiple of its block).
size_t shuffleFast(const uint8_t* in, size_t count, size_t elem, uint8_t* out) noexcept {
  size_t i = 0;
  if (elem == 8) {
    for (; i + 8 <= count; i += 8) {
      uint64_t w[8];
      std::memcpy(w, in + i * 8, 64);
      transpose8x8(w);
      for (size_t b = 0; b < 8; ++b) std::memcpy(out + b * count + i, &w[b], 8);
    }
    return i;
  }
#if defined(__SSE2__)
  if (elem == 4) {
    for (; i + 16 <= count; i += 16) {
      const uint8_t* src = in + i * 4;
      __m128i v0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
      __m128i v1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
      __m128i v2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
      __m128i v3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48));
      // Three rounds of byte interleaving sort the 64 bytes by byte position, elements
      // 0-7 and 8-15 apart; the 64-bit unpacks join the halves of each plane.
      __m128i a = _mm_unpacklo_epi8(v0, v1), b = _mm_unpackhi_epi8(v0, v1);
      __m128i c = _mm_unpacklo_epi8(v2, v3), d = _mm_unpackhi_epi8(v2, v3);
      __m128i a2 = _mm_unpacklo_epi8(a, b), b2 = _mm_unpackhi_epi8(a, b);
      __m128i c2 = _mm_unpacklo_epi8(c, d), d2 = _mm_unpackhi_epi8(c, d);
      __m128i a3 = _mm_unpacklo_epi8(a2, b2), b3 = _mm_unpackhi_epi8(a2, b2);  // planes 0|1, 2|3 of 0-7
      __m128i c3 = _mm_unpacklo_epi8(c2, d2), d3 = _mm_unpackhi_epi8(c2, d2);  // the same of 8-15
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm_unpacklo_epi64(a3, c3));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + count + i), _mm_unpackhi_epi64(a3, c3));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * count + i), _mm_unpacklo_epi64(b3, d3));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 3 * count + i), _mm_unpackhi_epi64(b3, d3));
    }
  } else if (elem == 2) {
    const __m128i low = _mm_set1_epi16(0x00FF);
    for (; i + 16 <= count; i += 16) {
      __m128i v0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i * 2));
      __m128i v1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i * 2 + 16));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                       _mm_packus_epi16(_mm_and_si128(v0, low), _mm_and_si128(v1, low)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + count + i),
                       _mm_packus_epi16(_mm_srli_epi16(v0, 8), _mm_srli_epi16(v1, 8)));
    }
  }
#endif
  return i;
}

size_t unshuffleFast(const uint8_t* in, size_t count, size_t elem, uint8_t* out) noexcept {
  size_t i = 0;
  if (elem == 8) {
    for (; i + 8 <= count; i += 8) {
      uint64_t w[8];
      for (size_t b = 0; b < 8; ++b) std::memcpy(&w[b], in + b * count + i, 8);
      transpose8x8(w);
      std::memcpy(out + i * 8, w, 64);
    }
    return i;
  }
#if defined(__SSE2__)
  if (elem == 4) {
    for (; i + 16 <= count; i += 16) {
      __m128i p0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
      __m128i p1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + count + i));
      __m128i p2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * count + i));
      __m128i p3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 3 * count + i));
      // The inverse of shuffleFast: planes 0|1 and 2|3 per half, then two rounds of byte
      // interleaving put each element's 4 bytes back together.
      __m128i a3 = _mm_unpacklo_epi64(p0, p1), b3 = _mm_unpacklo_epi64(p2, p3);  // elements 0-7
      __m128i c3 = _mm_unpackhi_epi64(p0, p1), d3 = _mm_unpackhi_epi64(p2, p3);  // elements 8-15
      __m128i x = _mm_unpacklo_epi8(a3, b3), y = _mm_unpackhi_epi8(a3, b3);
      __m128i z = _mm_unpacklo_epi8(c3, d3), w = _mm_unpackhi_epi8(c3, d3);
      uint8_t* dst = out + i * 4;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm_unpacklo_epi8(x, y));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 16), _mm_unpackhi_epi8(x, y));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 32), _mm_unpacklo_epi8(z, w));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 48), _mm_unpackhi_epi8(z, w));
    }
  } else if (elem == 2) {
    for (; i + 16 <= count; i += 16) {
      __m128i p0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
      __m128i p1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + count + i));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i * 2), _mm_unpacklo_epi8(p0, p1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i * 2 + 16), _mm_unpackhi_epi8(p0, p1));
    }
  }
#endif
  return i;
}

}  // namespace

void byteShuffle(const uint8_t* in, size_t n, size_t elem, uint8_t* out) noexcept {
  size_t count = n / elem;
  size_t done = shuffleFast(in, count, elem, out);
  shuffleBytes(in, count, elem, done, out);
  if (n > count * elem) std::memcpy(out + count * elem, in + count * elem, n - count * elem);  // null when n == 0
}

void byteUnshuffle(const uint8_t* in, size_t n, size_t elem, uint8_t* out) noexcept {
  size_t count = n / elem;
  size_t done = unshuffleFast(in, count, elem, out);
  unshuffleBytes(in, count, elem, done, out);
  if (n > count * elem) std::memcpy(out + count * elem, in + count * elem, n - count * elem);  // null when n == 0
}

void PayloadCodec::CDeleter::operator()(ZSTD_CCtx_s* c) const noexcept { ZSTD_freeCCtx(c); }
void PayloadCodec::DDeleter::operator()(ZSTD_DCtx_s* d) const noexcept { ZSTD_freeDCtx(d); }

PayloadCodec::PayloadCodec(int level) : level_(level), cctx_(ZSTD_createCCtx()), dctx_(ZSTD_createDCtx()) {}
PayloadCodec::~PayloadCodec() = default;

Codec PayloadCodec::encode(const uint8_t* raw, size_t n, Codec wanted, std::vector<uint8_t>& out, int level) {
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
  size_t got = ZSTD_compressCCtx(cctx_.get(), out.data() + base, bound, src, n, level);
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
    DLRR_REQUIRE(storedLen == rawLen, ErrorKind::Corrupt, "stored and raw lengths differ in an uncompressed frame",
                 storedLen, rawLen);
    out.resize(rawLen);
    if (rawLen) std::memcpy(out.data(), stored, rawLen);
    return;
  }
  unsigned long long declared = ZSTD_getFrameContentSize(stored, storedLen);
  DLRR_REQUIRE(declared == rawLen, ErrorKind::Corrupt, "compressed payload size does not match its frame header",
               declared, rawLen);
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
