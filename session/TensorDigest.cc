#include "session/TensorDigest.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <type_traits>

#include "format/Hash.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

namespace dlrr {
namespace {

float halfToFloat(uint16_t h) noexcept {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3FF) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16ToFloat(uint16_t h) noexcept {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// float16/bfloat16: decoded element by element (no vector path; CPU jobs digest float32).
template <typename T, typename Load>
void floatStats(const uint8_t* p, size_t n, Load load, DigestResult& r) noexcept {
  uint64_t nans = 0, infs = 0;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    double x = load(v);
    bool isnan = x != x;
    bool isinf =
        !isnan && (x == std::numeric_limits<double>::infinity() || x == -std::numeric_limits<double>::infinity());
    nans += isnan;
    infs += isinf;
    if (!isnan && !isinf) {
      lo = x < lo ? x : lo;
      hi = x > hi ? x : hi;
    }
  }
  r.nanCount = nans;
  r.infCount = infs;
  if (nans + infs == n) {
    r.min = r.max = std::numeric_limits<double>::quiet_NaN();
  } else {
    r.min = lo;
    r.max = hi;
  }
}

// float32/float64: the same figures as floatStats, computed from the bits in kLanes
// independent lanes so that the compiler vectorises the inner loop (SSE2 at -O2: integer
// compares classify NaN/Inf, non-finite values become +-inf before min/max, nothing is
// converted to double per element). floatStats ran at ~3 ns per float32 element, several
// times the cost of the hash; this is the recorder's hottest loop (every module output,
// gradient and parameter of every step).
template <typename F, typename U>
[[gnu::always_inline]] inline void ieeeStats(const uint8_t* p, size_t n, DigestResult& r) noexcept {
  static_assert(sizeof(F) == sizeof(U));
  constexpr size_t kLanes = 64 / sizeof(F);  // one cache line per iteration
  using S = std::make_signed_t<U>;
  constexpr U kAbsMask = ~U{0} >> 1;
  constexpr S kInfBits = static_cast<S>(std::bit_cast<U>(std::numeric_limits<F>::infinity()));
  constexpr F kInf = std::numeric_limits<F>::infinity();
  // Lane counters are U-wide: flush them into 64-bit totals before a uint32_t could wrap.
  constexpr size_t kBlock = size_t{1} << 24;
  uint64_t nans = 0, infs = 0;
  F lo = kInf, hi = -kInf;
  size_t i = 0;
  const size_t vecEnd = n - n % kLanes;
  while (i < vecEnd) {
    const size_t blockEnd = std::min(vecEnd, i + kBlock * kLanes);
    U nanLane[kLanes] = {}, infLane[kLanes] = {};
    F loLane[kLanes], hiLane[kLanes];
    for (size_t j = 0; j < kLanes; ++j) {
      loLane[j] = kInf;
      hiLane[j] = -kInf;
    }
    for (; i < blockEnd; i += kLanes) {
      // Signed compares: SSE2 has no unsigned ones (mag < 2^(bits-1): both orders agree).
      for (size_t j = 0; j < kLanes; ++j) {
        U bits;
        std::memcpy(&bits, p + (i + j) * sizeof(F), sizeof(F));
        const S mag = static_cast<S>(bits & kAbsMask);
        nanLane[j] += mag > kInfBits;
        infLane[j] += mag == kInfBits;
        const bool finite = mag < kInfBits;
        const F x = std::bit_cast<F>(bits);
        const F forMin = finite ? x : kInf;
        const F forMax = finite ? x : -kInf;
        loLane[j] = forMin < loLane[j] ? forMin : loLane[j];
        hiLane[j] = forMax > hiLane[j] ? forMax : hiLane[j];
      }
    }
    for (size_t j = 0; j < kLanes; ++j) {
      nans += nanLane[j];
      infs += infLane[j];
      lo = loLane[j] < lo ? loLane[j] : lo;
      hi = hiLane[j] > hi ? hiLane[j] : hi;
    }
  }
  for (; i < n; ++i) {
    U bits;
    std::memcpy(&bits, p + i * sizeof(F), sizeof(F));
    const S mag = static_cast<S>(bits & kAbsMask);
    nans += mag > kInfBits;
    infs += mag == kInfBits;
    if (mag < kInfBits) {
      const F x = std::bit_cast<F>(bits);
      lo = x < lo ? x : lo;
      hi = x > hi ? x : hi;
    }
  }
  r.nanCount = nans;
  r.infCount = infs;
  if (nans + infs == n) {
    r.min = r.max = std::numeric_limits<double>::quiet_NaN();
    return;
  }
  // The sequential scan keeps the first of equal values, and +0 and -0 are equal: when the
  // extreme is a zero, its sign is that of the first zero in the tensor, whichever lane saw
  // it. Find that zero (an early-exit scan; ReLU outputs have one near the start).
  if (lo == 0 || hi == 0) {
    for (size_t k = 0; k < n; ++k) {
      U bits;
      std::memcpy(&bits, p + k * sizeof(F), sizeof(F));
      if ((bits & kAbsMask) == 0) {
        const F zero = std::bit_cast<F>(bits);
        if (lo == 0) lo = zero;
        if (hi == 0) hi = zero;
        break;
      }
    }
  }
  r.min = static_cast<double>(lo);
  r.max = static_cast<double>(hi);
}

template <typename T>
void intStats(const uint8_t* p, size_t n, DigestResult& r) noexcept {
  if (n == 0) {
    r.min = r.max = std::numeric_limits<double>::quiet_NaN();
    return;
  }
  T lo = std::numeric_limits<T>::max(), hi = std::numeric_limits<T>::lowest();
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
  }
  r.min = static_cast<double>(lo);
  r.max = static_cast<double>(hi);
}

// float32 is what CPU jobs digest: compiled twice, for AVX2 (twice the lanes per
// instruction) and for the baseline, and picked once at load by the CPU (GCC function
// multiversioning, an ifunc). Same source, so the same figures either way. Not under
// ThreadSanitizer: its runtime is not yet initialised when the ifunc resolver runs at load,
// and the unit tests crash before main.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
[[gnu::target_clones("avx2", "default")]]
#endif
void float32Stats(const uint8_t* p, size_t n, DigestResult& r) noexcept {
  ieeeStats<float, uint32_t>(p, n, r);
}

// XXH3-64 of the bytes with each NaN (exponent all ones, mantissa not zero) replaced by
// `canonical`, streamed through a small buffer: no allocation, and run only for tensors that
// hold a NaN (the statistics pass counted them).
template <typename U>
uint64_t canonicalNanHash(const uint8_t* p, size_t n, U canonical) noexcept {
  constexpr U kSign = U(1) << (sizeof(U) * 8 - 1);
  constexpr U kExp = sizeof(U) == 8 ? U(0x7FF0000000000000ull) : sizeof(U) == 4 ? U(0x7F800000u) : U(0);
  static_assert(sizeof(U) >= 4, "16-bit floats pass their own masks");
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  U buf[512];
  for (size_t i = 0; i < n;) {
    size_t m = std::min<size_t>(n - i, std::size(buf));
    std::memcpy(buf, p + i * sizeof(U), m * sizeof(U));
    for (size_t k = 0; k < m; ++k)
      if ((buf[k] & ~kSign) > kExp) buf[k] = canonical;
    XXH3_64bits_update(&state, buf, m * sizeof(U));
    i += m;
  }
  return XXH3_64bits_digest(&state);
}

uint64_t canonicalNanHash16(const uint8_t* p, size_t n, uint16_t infBits, uint16_t canonical) noexcept {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  uint16_t buf[1024];
  for (size_t i = 0; i < n;) {
    size_t m = std::min<size_t>(n - i, std::size(buf));
    std::memcpy(buf, p + i * 2, m * 2);
    for (size_t k = 0; k < m; ++k)
      if ((buf[k] & 0x7FFFu) > infBits) buf[k] = canonical;
    XXH3_64bits_update(&state, buf, m * 2);
    i += m;
  }
  return XXH3_64bits_digest(&state);
}

}  // namespace

unsigned dtypeElemSize(std::string_view d) noexcept {
  if (d == "float32" || d == "int32" || d == "uint32") return 4;
  if (d == "float64" || d == "int64" || d == "complex64" || d == "uint64") return 8;
  if (d == "float16" || d == "bfloat16" || d == "int16" || d == "uint16") return 2;
  if (d == "uint8" || d == "int8" || d == "bool" || d == "float8_e4m3fn" || d == "float8_e5m2") return 1;
  if (d == "complex128") return 16;
  return 0;
}

bool dtypeIsFloat(std::string_view d) noexcept {
  return d == "float32" || d == "float64" || d == "float16" || d == "bfloat16";
}

DigestResult computeDigest(std::string_view dtype, const void* data, size_t nbytes) noexcept {
  DigestResult r;
  r.hash = hash64(data, nbytes);
  const auto* p = static_cast<const uint8_t*>(data);
  if (dtype == "float32") {
    float32Stats(p, nbytes / 4, r);
  } else if (dtype == "float64") {
    ieeeStats<double, uint64_t>(p, nbytes / 8, r);
  } else if (dtype == "float16") {
    floatStats<uint16_t>(
        p, nbytes / 2, [](uint16_t v) { return static_cast<double>(halfToFloat(v)); }, r);
  } else if (dtype == "bfloat16") {
    floatStats<uint16_t>(
        p, nbytes / 2, [](uint16_t v) { return static_cast<double>(bf16ToFloat(v)); }, r);
  } else if (dtype == "int64") {
    intStats<int64_t>(p, nbytes / 8, r);
  } else if (dtype == "int32") {
    intStats<int32_t>(p, nbytes / 4, r);
  } else if (dtype == "int16") {
    intStats<int16_t>(p, nbytes / 2, r);
  } else if (dtype == "int8") {
    intStats<int8_t>(p, nbytes, r);
  } else if (dtype == "uint8" || dtype == "bool") {
    intStats<uint8_t>(p, nbytes, r);
  } else {
    r.min = r.max = std::numeric_limits<double>::quiet_NaN();
  }
  r.rawHash = r.hash;
  if (r.nanCount) {  // set by the float dtypes' statistics only
    if (dtype == "float32")
      r.hash = canonicalNanHash<uint32_t>(p, nbytes / 4, 0x7FC00000u);
    else if (dtype == "float64")
      r.hash = canonicalNanHash<uint64_t>(p, nbytes / 8, 0x7FF8000000000000ull);
    else if (dtype == "float16")
      r.hash = canonicalNanHash16(p, nbytes / 2, 0x7C00u, 0x7E00u);
    else if (dtype == "bfloat16")
      r.hash = canonicalNanHash16(p, nbytes / 2, 0x7F80u, 0x7FC0u);
  }
  return r;
}

}  // namespace dlrr
