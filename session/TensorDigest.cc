#include "session/TensorDigest.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <type_traits>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "format/Hash.h"
#include "format/XxhDispatch.h"

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

// float32/float64: the same figures as floatStats, computed from the bits in vectors of
// independent lanes (GCC vector extensions, compiled once per vector width: W = 64 bytes for
// AVX-512, 32 for AVX2, 16 for the baseline; picked by the CPU at first use). Integer
// compares classify NaN/Inf, nothing is converted to double per element. This is the
// recorder's hottest loop: every module output, gradient and parameter of every step.
//
// The vector helpers have internal linkage and are always inlined: GCC's note that wide vector
// arguments change the calling convention without AVX-512 does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"
template <typename F, typename U, size_t W>
struct IeeeVec {
  static_assert(sizeof(F) == sizeof(U));
  using S = std::make_signed_t<U>;
  typedef F VF __attribute__((vector_size(W)));
  typedef S VS __attribute__((vector_size(W)));
  static constexpr size_t kLanes = W / sizeof(F);

  [[gnu::always_inline]] static VS splat(S x) noexcept {
    VS v;
    for (size_t j = 0; j < kLanes; ++j) v[j] = x;
    return v;
  }
};

template <typename F, typename U>
struct IeeeBits {
  using S = std::make_signed_t<U>;
  static constexpr S kAbsMask = static_cast<S>(~U{0} >> 1);
  static constexpr S kInfBits = static_cast<S>(std::bit_cast<U>(std::numeric_limits<F>::infinity()));
  static constexpr F kInf = std::numeric_limits<F>::infinity();
};

// What the scan carries between chunks: the count of finite elements, and the min and max so
// far (as bits) of each lane of kChains independent vector chains. One min/max chain would wait
// for the previous compare at every vector; four keep the loads flowing. Room for the widest
// vectors; narrower kernels use the start of each chain and leave the rest at +-inf. Which chain
// or lane saw a value first cannot matter: equal floats have equal bits, except +0 and -0,
// whose sign ieeeDigest takes from the first zero in the tensor.
template <typename F, typename U>
struct IeeeAcc {
  using S = std::make_signed_t<U>;
  static constexpr size_t kChains = 4;
  static constexpr size_t kSlots = 64 / sizeof(S);
  alignas(64) S lo[kChains][kSlots];
  alignas(64) S hi[kChains][kSlots];
  uint64_t finite = 0;
  IeeeAcc() noexcept {
    for (size_t c = 0; c < kChains; ++c) {
      for (size_t j = 0; j < kSlots; ++j) {
        lo[c][j] = std::bit_cast<S>(IeeeBits<F, U>::kInf);
        hi[c][j] = std::bit_cast<S>(-IeeeBits<F, U>::kInf);
      }
    }
  }
};

// The whole W-byte vectors in [p, p + nbytes) into acc (nbytes a multiple of 64).
// Exact = false, the first pass: min and max of every element through the float min/max
// instructions (a NaN never replaces the accumulator: `x < l ? x : l` keeps l), correct only
// while every element is finite, which the same pass counts; a tensor with any NaN or Inf is
// scanned again with Exact = true, which masks them out. Half the operations per vector.
template <typename F, typename U, size_t W, bool Exact>
[[gnu::always_inline]] inline void ieeeScan(const uint8_t* p, size_t nbytes, IeeeAcc<F, U>& acc) noexcept {
  using V = IeeeVec<F, U, W>;
  using B = IeeeBits<F, U>;
  using VS = typename V::VS;
  using VF = typename V::VF;
  static_assert(IeeeAcc<F, U>::kChains == 4);
  const size_t nvec = nbytes / W;
  const VS absMask = V::splat(B::kAbsMask), infBits = V::splat(B::kInfBits);
  // Named, not an array: GCC keeps an array of vectors in memory across iterations.
  VS lo0, lo1, lo2, lo3, hi0, hi1, hi2, hi3;
  std::memcpy(&lo0, acc.lo[0], W);
  std::memcpy(&lo1, acc.lo[1], W);
  std::memcpy(&lo2, acc.lo[2], W);
  std::memcpy(&lo3, acc.lo[3], W);
  std::memcpy(&hi0, acc.hi[0], W);
  std::memcpy(&hi1, acc.hi[1], W);
  std::memcpy(&hi2, acc.hi[2], W);
  std::memcpy(&hi3, acc.hi[3], W);
  // Only finite elements are counted here (one compare feeds the count and both masks); NaN
  // and Inf are told apart afterwards, in the rare tensors that have either. Bit selects, not
  // the vector ?: operator, which GCC lowers element by element where registers are narrower.
  VS finiteLane = {};
  auto one = [&](const uint8_t* q, VS& l, VS& h) {
    VS bits;
    std::memcpy(&bits, q, W);
    const VS finite = (bits & absMask) < infBits;  // all ones where finite
    finiteLane -= finite;
    const VF x = std::bit_cast<VF>(bits);
    if constexpr (Exact) {
      const VS below = finite & (x < std::bit_cast<VF>(l));  // strict: keeps l on ties
      const VS above = finite & (x > std::bit_cast<VF>(h));
      l = (bits & below) | (l & ~below);
      h = (bits & above) | (h & ~above);
    } else {  // minps/maxps (strict compares too: l on ties and NaN)
      const VF lf = std::bit_cast<VF>(l), hf = std::bit_cast<VF>(h);
      l = std::bit_cast<VS>(x < lf ? x : lf);
      h = std::bit_cast<VS>(x > hf ? x : hf);
    }
  };
  auto flush = [&] {  // lane counters are S-wide: into a 64-bit total before they could wrap
    for (size_t j = 0; j < V::kLanes; ++j) acc.finite += static_cast<U>(finiteLane[j]);
    finiteLane = VS{};
  };
  constexpr size_t kBlock = size_t{1} << 24;  // vectors between flushes
  size_t i = 0;
  while (i + 4 <= nvec) {
    const size_t blockEnd = std::min(nvec - nvec % 4, i + kBlock);
    for (; i < blockEnd; i += 4) {
      one(p + i * W, lo0, hi0);
      one(p + (i + 1) * W, lo1, hi1);
      one(p + (i + 2) * W, lo2, hi2);
      one(p + (i + 3) * W, lo3, hi3);
    }
    flush();
  }
  for (; i < nvec; ++i) one(p + i * W, lo0, hi0);
  flush();
  std::memcpy(acc.lo[0], &lo0, W);
  std::memcpy(acc.lo[1], &lo1, W);
  std::memcpy(acc.lo[2], &lo2, W);
  std::memcpy(acc.lo[3], &lo3, W);
  std::memcpy(acc.hi[0], &hi0, W);
  std::memcpy(acc.hi[1], &hi1, W);
  std::memcpy(acc.hi[2], &hi2, W);
  std::memcpy(acc.hi[3], &hi3, W);
}

template <typename F, typename U>
using ScanFn = void (*)(const uint8_t*, size_t, IeeeAcc<F, U>&) noexcept;

// One kernel per width, each compiled for the instructions that width needs.
#if defined(__x86_64__) && defined(__GNUC__)
#define DLRR_TARGET(isa) [[gnu::target(isa)]]
#define DLRR_WIDE_KERNELS 1
#else
#define DLRR_TARGET(isa)
#define DLRR_WIDE_KERNELS 0
#endif
template <typename F, typename U, bool Exact>
DLRR_TARGET("avx512f")
void scan64(const uint8_t* p, size_t n, IeeeAcc<F, U>& acc) noexcept {
  ieeeScan<F, U, 64, Exact>(p, n, acc);
}
template <typename F, typename U, bool Exact>
DLRR_TARGET("avx2")
void scan32(const uint8_t* p, size_t n, IeeeAcc<F, U>& acc) noexcept {
  ieeeScan<F, U, 32, Exact>(p, n, acc);
}
template <typename F, typename U, bool Exact>
void scan16(const uint8_t* p, size_t n, IeeeAcc<F, U>& acc) noexcept {
  ieeeScan<F, U, 16, Exact>(p, n, acc);
}

// The widths this CPU runs, widest first; found once (the CPU does not change).
const std::vector<unsigned>& cpuWidths() {
  static const std::vector<unsigned> widths = [] {
    std::vector<unsigned> w;
#if DLRR_WIDE_KERNELS
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) w.push_back(64);
    if (__builtin_cpu_supports("avx2")) w.push_back(32);
#endif
    w.push_back(16);
    return w;
  }();
  return widths;
}

template <typename F, typename U>
struct ScanPair {
  ScanFn<F, U> fast;   // every element finite: exact; else the exact one runs again
  ScanFn<F, U> exact;  // NaN and Inf masked out of min and max
};

struct Kernels {
  ScanPair<float, uint32_t> f32;
  ScanPair<double, uint64_t> f64;
};

// The kernels of `width`; the baseline's for a width this CPU cannot run (its instructions
// would fault) or this build does not have.
Kernels kernelsOfWidth(unsigned width) noexcept {
  const auto& widths = cpuWidths();
  if (std::find(widths.begin(), widths.end(), width) == widths.end()) width = 16;
#if DLRR_WIDE_KERNELS
  if (width == 64)
    return {{scan64<float, uint32_t, false>, scan64<float, uint32_t, true>},
            {scan64<double, uint64_t, false>, scan64<double, uint64_t, true>}};
  if (width == 32)
    return {{scan32<float, uint32_t, false>, scan32<float, uint32_t, true>},
            {scan32<double, uint64_t, false>, scan32<double, uint64_t, true>}};
#endif
  return {{scan16<float, uint32_t, false>, scan16<float, uint32_t, true>},
          {scan16<double, uint64_t, false>, scan16<double, uint64_t, true>}};
}

const Kernels& bestKernels() noexcept {
  static const Kernels kernels = kernelsOfWidth(cpuWidths().front());
  return kernels;
}

// The failure ring's copy: the ring is read back only when the job fails, so its bytes are
// written around the caches (non-temporal stores): no read of the destination's old lines
// first, and the job's own working set stays cached. The caller fences (copyFence) once the
// whole tensor is written. Small copies, and CPUs without SSE2, take memcpy.
constexpr size_t kStreamMinBytes = 4096;

void copyStreaming(uint8_t* dst, const uint8_t* src, size_t n) noexcept {
#if defined(__SSE2__)
  if (n >= kStreamMinBytes) {
    const size_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
    std::memcpy(dst, src, head);
    dst += head, src += head, n -= head;
    for (; n >= 64; dst += 64, src += 64, n -= 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
      const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 48), d);
    }
  }
#endif
  if (n) std::memcpy(dst, src, n);
}

// Non-temporal stores are weakly ordered: fenced before the ring's lock is released.
void copyFence() noexcept {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// Tensors from this size on are hashed and scanned in one pass of chunks that stay in the
// first-level cache, instead of two passes over the whole tensor (the second one from L2 or
// memory): a module output of a few hundred KB is read once.
constexpr size_t kFuseMinBytes = 64 << 10;
constexpr size_t kChunkBytes = 16 << 10;

// Hash and statistics of a float32/float64 tensor of nbytes (whole elements counted; trailing
// bytes are hashed, as for every dtype).
// `copyTo` (may be null): receives the nbytes, each chunk copied while it is still in the
// first-level cache from the scan and the hash (the failure ring's copy without a third read
// of the tensor from L2 or memory).
template <typename F, typename U>
void ieeeDigest(ScanPair<F, U> kernels, const uint8_t* p, size_t nbytes, uint8_t* copyTo, DigestResult& r) noexcept {
  const ScanFn<F, U> scan = kernels.fast;
  using B = IeeeBits<F, U>;
  using S = typename B::S;
  const size_t n = nbytes / sizeof(F);
  const size_t vecBytes = nbytes / 64 * 64;  // the scan's part; the rest element by element
  const size_t nvecElems = vecBytes / sizeof(F);
  F lo = B::kInf, hi = -B::kInf;
  uint64_t nans = 0, infs = 0;
  auto classify = [&](size_t i) {  // NaN and Inf counts of element i; true when finite
    U bits;
    std::memcpy(&bits, p + i * sizeof(F), sizeof(F));
    const S mag = static_cast<S>(bits & static_cast<U>(B::kAbsMask));
    nans += mag > B::kInfBits;
    infs += mag == B::kInfBits;
    return mag < B::kInfBits;
  };
  if (vecBytes == 0) {
    // Under 64 bytes (a loss, a small layer's output): no vector part, so neither the
    // accumulators (2 x 256 bytes to set up and reduce) nor the scan call.
    r.hash = DLRR_XXH3_64(p, nbytes);
    if (copyTo) copyStreaming(copyTo, p, nbytes);
  } else {
    IeeeAcc<F, U> acc;
    if (nbytes >= kFuseMinBytes) {
      XXH3_state_t state;
      XXH3_64bits_reset(&state);
      for (size_t done = 0; done < vecBytes;) {
        const size_t m = std::min(kChunkBytes, vecBytes - done);
        scan(p + done, m, acc);
        DLRR_XXH3_64_UPDATE(&state, p + done, m);
        if (copyTo) copyStreaming(copyTo + done, p + done, m);
        done += m;
      }
      DLRR_XXH3_64_UPDATE(&state, p + vecBytes, nbytes - vecBytes);
      if (copyTo) copyStreaming(copyTo + vecBytes, p + vecBytes, nbytes - vecBytes);
      r.hash = XXH3_64bits_digest(&state);
    } else {
      scan(p, vecBytes, acc);
      r.hash = DLRR_XXH3_64(p, nbytes);
      if (copyTo) copyStreaming(copyTo, p, nbytes);  // under 64 KB: still in L1/L2 from the scan
    }
    if (acc.finite != nvecElems) {  // a NaN or an Inf: the min and max again, without them
      const uint64_t finite = acc.finite;
      acc = IeeeAcc<F, U>();
      kernels.exact(p, vecBytes, acc);
      acc.finite = finite;
    }
    for (size_t c = 0; c < IeeeAcc<F, U>::kChains; ++c) {
      for (size_t j = 0; j < IeeeAcc<F, U>::kSlots; ++j) {
        const F l = std::bit_cast<F>(acc.lo[c][j]), h = std::bit_cast<F>(acc.hi[c][j]);
        lo = l < lo ? l : lo;
        hi = h > hi ? h : hi;
      }
    }
    if (acc.finite != nvecElems) {
      for (size_t i = 0; i < nvecElems; ++i) classify(i);
    }
  }
  for (size_t i = nvecElems; i < n; ++i) {
    if (classify(i)) {
      F x;
      std::memcpy(&x, p + i * sizeof(F), sizeof(F));
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
      if ((bits & static_cast<U>(B::kAbsMask)) == 0) {
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
    DLRR_XXH3_64_UPDATE(&state, buf, m * sizeof(U));
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
    DLRR_XXH3_64_UPDATE(&state, buf, m * 2);
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

namespace {

DigestResult digestWith(const Kernels& k, std::string_view dtype, const void* data, size_t nbytes,
                        void* copyTo) noexcept {
  DigestResult r;
  const auto* p = static_cast<const uint8_t*>(data);
  auto* dst = static_cast<uint8_t*>(copyTo);
  // A complex tensor is its real and imaginary parts interleaved: scanned as twice as many
  // floats, so a NaN or Inf in either part is counted (torch.stft of a signal with an Inf).
  if (dtype == "float32" || dtype == "complex64") {
    ieeeDigest<float, uint32_t>(k.f32, p, nbytes, dst, r);
  } else if (dtype == "float64" || dtype == "complex128") {
    ieeeDigest<double, uint64_t>(k.f64, p, nbytes, dst, r);
  } else {
    r.hash = hash64(data, nbytes);
    if (dst) copyStreaming(dst, p, nbytes);  // other dtypes: a second pass, as before
    if (dtype == "float16") {
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
  }
  if (dst) copyFence();
  r.rawHash = r.hash;
  if (r.nanCount) {  // set by the float dtypes' statistics only
    if (dtype == "float32" || dtype == "complex64")
      r.hash = canonicalNanHash<uint32_t>(p, nbytes / 4, 0x7FC00000u);
    else if (dtype == "float64" || dtype == "complex128")
      r.hash = canonicalNanHash<uint64_t>(p, nbytes / 8, 0x7FF8000000000000ull);
    else if (dtype == "float16")
      r.hash = canonicalNanHash16(p, nbytes / 2, 0x7C00u, 0x7E00u);
    else if (dtype == "bfloat16")
      r.hash = canonicalNanHash16(p, nbytes / 2, 0x7F80u, 0x7FC0u);
  }
  return r;
}

}  // namespace

std::vector<unsigned> digestVectorWidths() { return cpuWidths(); }

DigestResult computeDigest(std::string_view dtype, const void* data, size_t nbytes) noexcept {
  return digestWith(bestKernels(), dtype, data, nbytes, nullptr);
}

DigestResult computeDigestAndCopy(std::string_view dtype, const void* data, size_t nbytes, void* copyTo) noexcept {
  return digestWith(bestKernels(), dtype, data, nbytes, copyTo);
}

DigestResult computeDigestWithWidth(unsigned width, std::string_view dtype, const void* data, size_t nbytes,
                                    void* copyTo) noexcept {
  return digestWith(kernelsOfWidth(width), dtype, data, nbytes, copyTo);
}

}  // namespace dlrr
