#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "format/Hash.h"
#include "session/TensorDigest.h"

namespace dlrr {
namespace {

TEST(TensorDigest, Float32CountsAndRange) {
  std::vector<float> v = {1.5f,          -2.0f,
                          std::nanf(""), std::numeric_limits<float>::infinity(),
                          0.25f,         -std::numeric_limits<float>::infinity()};
  DigestResult r = computeDigest("float32", v.data(), v.size() * 4);
  EXPECT_EQ(r.nanCount, 1u);
  EXPECT_EQ(r.infCount, 2u);
  EXPECT_DOUBLE_EQ(r.min, -2.0);
  EXPECT_DOUBLE_EQ(r.max, 1.5);
}

TEST(TensorDigest, HashIsBitExact) {
  std::vector<float> a = {0.0f, 1.0f}, b = {-0.0f, 1.0f};  // equal as numbers, not as bits
  EXPECT_NE(computeDigest("float32", a.data(), 8).hash, computeDigest("float32", b.data(), 8).hash);
  EXPECT_EQ(computeDigest("float32", a.data(), 8).hash, computeDigest("float32", a.data(), 8).hash);
}

// Non-finite values compare by class: NaNs with another payload or sign hash alike (compiled and
// eager kernels make different NaNs), +Inf and -Inf stay apart, every finite bit still counts.
template <typename U>
void nanClassCase(const char* dtype, U one, U nanA, U nanB, U posInf, U negInf) {
  std::vector<U> a = {one, nanA, posInf, one}, b = {one, nanB, posInf, one};
  DigestResult ra = computeDigest(dtype, a.data(), a.size() * sizeof(U));
  DigestResult rb = computeDigest(dtype, b.data(), b.size() * sizeof(U));
  EXPECT_EQ(ra.hash, rb.hash) << dtype;
  EXPECT_NE(ra.rawHash, rb.rawHash) << dtype;   // the bits themselves differ
  std::vector<U> c = {one, nanA, negInf, one};  // +Inf became -Inf
  EXPECT_NE(computeDigest(dtype, c.data(), c.size() * sizeof(U)).hash, ra.hash) << dtype;
  std::vector<U> d = {one, nanA, posInf, static_cast<U>(one ^ 1)};  // one finite bit
  EXPECT_NE(computeDigest(dtype, d.data(), d.size() * sizeof(U)).hash, ra.hash) << dtype;
  std::vector<U> e = {one, one, posInf, one};  // a NaN became a number
  EXPECT_NE(computeDigest(dtype, e.data(), e.size() * sizeof(U)).hash, ra.hash) << dtype;
}

TEST(TensorDigest, NonFiniteValuesCompareByClass) {
  nanClassCase<uint32_t>("float32", 0x3F800000u, 0x7FC00000u, 0xFFC00001u, 0x7F800000u, 0xFF800000u);
  nanClassCase<uint64_t>("float64", 0x3FF0000000000000ull, 0x7FF8000000000000ull, 0xFFF0000000000123ull,
                         0x7FF0000000000000ull, 0xFFF0000000000000ull);
  nanClassCase<uint16_t>("float16", 0x3C00, 0x7E00, 0xFC01, 0x7C00, 0xFC00);
  nanClassCase<uint16_t>("bfloat16", 0x3F80, 0x7FC0, 0xFF81, 0x7F80, 0xFF80);
  // Without a NaN, or with only the canonical one, the hash is the raw bytes' (older traces).
  float f[2] = {1.0f, std::numeric_limits<float>::infinity()};
  DigestResult r = computeDigest("float32", f, sizeof f);
  EXPECT_EQ(r.hash, r.rawHash);
  uint32_t q[2] = {0x3F800000u, 0x7FC00000u};
  r = computeDigest("float32", q, sizeof q);
  EXPECT_EQ(r.hash, r.rawHash);
  // Longer than the streaming buffer: NaNs in every chunk.
  std::vector<uint32_t> big(5000, 0x40000000u), big2;
  for (size_t i = 0; i < big.size(); i += 7) big[i] = 0x7FC00000u;
  big2 = big;
  for (size_t i = 0; i < big2.size(); i += 7) big2[i] = 0xFFFFFFFFu;
  EXPECT_EQ(computeDigest("float32", big.data(), big.size() * 4).hash,
            computeDigest("float32", big2.data(), big2.size() * 4).hash);
  big2[4999] = 0x40000001u;
  EXPECT_NE(computeDigest("float32", big.data(), big.size() * 4).hash,
            computeDigest("float32", big2.data(), big2.size() * 4).hash);
}

TEST(TensorDigest, AllNonFiniteHasNanRange) {
  float v[2] = {std::nanf(""), std::nanf("")};
  DigestResult r = computeDigest("float32", v, sizeof v);
  EXPECT_EQ(r.nanCount, 2u);
  EXPECT_TRUE(std::isnan(r.min));
  EXPECT_TRUE(std::isnan(r.max));
}

TEST(TensorDigest, HalfAndBfloat16) {
  // float16: 0x3C00 = 1.0, 0x7C00 = inf, 0x7E00 = nan, 0xC000 = -2.0, 0x0001 = smallest subnormal
  uint16_t h[5] = {0x3C00, 0x7C00, 0x7E00, 0xC000, 0x0001};
  DigestResult r = computeDigest("float16", h, sizeof h);
  EXPECT_EQ(r.nanCount, 1u);
  EXPECT_EQ(r.infCount, 1u);
  EXPECT_DOUBLE_EQ(r.min, -2.0);
  EXPECT_DOUBLE_EQ(r.max, 1.0);
  // bfloat16: upper half of a float32.
  uint16_t b[3] = {0x3F80 /*1*/, 0xFF80 /*-inf*/, 0x4040 /*3*/};
  r = computeDigest("bfloat16", b, sizeof b);
  EXPECT_EQ(r.infCount, 1u);
  EXPECT_DOUBLE_EQ(r.max, 3.0);
}

TEST(TensorDigest, IntegersAndUnknownDtypes) {
  int64_t v[3] = {5, -7, 2};
  DigestResult r = computeDigest("int64", v, sizeof v);
  EXPECT_EQ(r.nanCount + r.infCount, 0u);
  EXPECT_DOUBLE_EQ(r.min, -7);
  EXPECT_DOUBLE_EQ(r.max, 5);
  r = computeDigest("uint64", v, 8);
  EXPECT_TRUE(std::isnan(r.min));
  EXPECT_EQ(dtypeElemSize("bfloat16"), 2u);
  EXPECT_EQ(dtypeElemSize("nonsense"), 0u);
  EXPECT_TRUE(dtypeIsFloat("float64"));
  EXPECT_FALSE(dtypeIsFloat("int8"));
}

// A complex value is non-finite when either part is: torch.stft of a signal holding an Inf
// gives complex Infs and NaNs, and the first non-finite module output is the stft's.
TEST(TensorDigest, ComplexCountsBothParts) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  float c64[6] = {1, -2, inf, 0.5f, 3, nan};  // 1-2i, inf+0.5i, 3+nan i
  DigestResult r = computeDigest("complex64", c64, sizeof c64);
  EXPECT_EQ(r.infCount, 1u);
  EXPECT_EQ(r.nanCount, 1u);
  EXPECT_DOUBLE_EQ(r.min, -2);
  EXPECT_DOUBLE_EQ(r.max, 3);
  EXPECT_EQ(r.hash, computeDigest("float32", c64, sizeof c64).hash);
  double c128[4] = {-inf, 1, 2, 4};
  r = computeDigest("complex128", c128, sizeof c128);
  EXPECT_EQ(r.infCount, 1u);
  EXPECT_EQ(r.nanCount, 0u);
  EXPECT_DOUBLE_EQ(r.min, 1);
  EXPECT_DOUBLE_EQ(r.max, 4);
}

TEST(TensorDigest, EmptyTensor) {
  DigestResult r = computeDigest("float32", nullptr, 0);
  EXPECT_EQ(r.nanCount, 0u);
  EXPECT_TRUE(std::isnan(r.min));
}

// The scalar scan computeDigest used before the lane-parallel one: every figure must stay
// the same bit for bit (the sign of a zero min/max included), since traces recorded by one
// version are read next to digests computed by another.
template <typename F>
DigestResult referenceStats(const std::vector<F>& v) {
  DigestResult r;
  uint64_t nans = 0, infs = 0;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (F f : v) {
    double x = static_cast<double>(f);
    bool isnan = x != x;
    bool isinf = !isnan && std::isinf(x);
    nans += isnan;
    infs += isinf;
    if (!isnan && !isinf) {
      lo = x < lo ? x : lo;
      hi = x > hi ? x : hi;
    }
  }
  r.nanCount = nans;
  r.infCount = infs;
  if (nans + infs == v.size()) {
    r.min = r.max = std::numeric_limits<double>::quiet_NaN();
  } else {
    r.min = lo;
    r.max = hi;
  }
  return r;
}

bool sameBits(double a, double b) {
  uint64_t x, y;
  std::memcpy(&x, &a, 8);
  std::memcpy(&y, &b, 8);
  return x == y || (std::isnan(a) && std::isnan(b));
}

// Every kernel width this CPU runs (AVX-512, AVX2, baseline), and computeDigest itself: the
// statistics of the scalar reference, and the raw hash of the bytes in one XXH3 call (large
// tensors are hashed in chunks, interleaved with the scan).
template <typename F>
void expectSameAsReference(const std::vector<F>& v, const char* dtype, const std::string& what) {
  const size_t nbytes = v.size() * sizeof(F);
  DigestResult want = referenceStats(v);
  std::vector<std::pair<std::string, DigestResult>> results;
  results.emplace_back("computeDigest", computeDigest(dtype, v.data(), nbytes));
  for (unsigned w : digestVectorWidths())
    results.emplace_back("width " + std::to_string(w), computeDigestWithWidth(w, dtype, v.data(), nbytes));
  for (const auto& [kernel, got] : results) {
    EXPECT_EQ(got.nanCount, want.nanCount) << what << ", " << kernel;
    EXPECT_EQ(got.infCount, want.infCount) << what << ", " << kernel;
    EXPECT_TRUE(sameBits(got.min, want.min)) << what << ", " << kernel << ": min " << got.min << " want " << want.min;
    EXPECT_TRUE(sameBits(got.max, want.max)) << what << ", " << kernel << ": max " << got.max << " want " << want.max;
    EXPECT_EQ(got.rawHash, hash64(v.data(), nbytes)) << what << ", " << kernel;
    EXPECT_EQ(got.hash, results.front().second.hash) << what << ", " << kernel;
  }
}

template <typename F>
void fuzzAgainstReference(const char* dtype) {
  std::mt19937 rng(42);
  const F inf = std::numeric_limits<F>::infinity();
  const F specials[] = {F(0),
                        -F(0),
                        inf,
                        -inf,
                        std::numeric_limits<F>::quiet_NaN(),
                        -std::numeric_limits<F>::quiet_NaN(),
                        std::numeric_limits<F>::denorm_min(),
                        std::numeric_limits<F>::max(),
                        std::numeric_limits<F>::lowest()};
  std::normal_distribution<double> normal(0.0, 1.0);
  // Lengths around the lane count and block edges, around the one-pass size (64 KB) and its
  // 16 KB chunks, and long tensors.
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{15}, size_t{16}, size_t{17}, size_t{31}, size_t{64},
                   size_t{100}, size_t{1000}, size_t{16383}, size_t{16385}, size_t{65537}, size_t{300001}}) {
    for (int pattern = 0; pattern < 8; ++pattern) {
      std::vector<F> v(n);
      for (auto& x : v) {
        double g = normal(rng);
        switch (pattern) {
          case 0:
            x = static_cast<F>(g);
            break;  // plain
          case 1:
            x = static_cast<F>(g > 0 ? g : 0.0);
            break;  // ReLU: +0 min
          case 2:
            x = (rng() & 1) ? F(0) : -F(0);
            break;  // zeros of both signs
          case 3:
            x = static_cast<F>(g < 0 ? g : (rng() & 1 ? 0.0 : -0.0));
            break;  // zero max
          case 4:
            x = specials[rng() % std::size(specials)];
            break;  // mostly special
          case 5:
            x = (rng() % 50 == 0) ? specials[rng() % 6] : static_cast<F>(g);
            break;  // sparse NaN/Inf
          case 6:
            x = (rng() & 1) ? inf : std::numeric_limits<F>::quiet_NaN();
            break;  // nothing finite
          default:
            x = static_cast<F>(-std::fabs(g)) - F(0);
            break;  // negative only
        }
      }
      // A zero of the other sign placed late must not decide the sign of a zero extreme.
      if (pattern == 1 && n > 20) v[n - 3] = -F(0);
      expectSameAsReference(v, dtype,
                            std::string(dtype) + " n=" + std::to_string(n) + " pattern " + std::to_string(pattern));
    }
  }
}

TEST(TensorDigest, Float32MatchesScalarReference) { fuzzAgainstReference<float>("float32"); }
TEST(TensorDigest, Float64MatchesScalarReference) { fuzzAgainstReference<double>("float64"); }

TEST(TensorDigest, ZeroExtremeTakesTheSignOfTheFirstZero) {
  // Lane 1 sees -0 first in index order; lane 0 sees +0 only later.
  std::vector<float> v(64, 1.0f);
  v[1] = -0.0f;
  v[16] = 0.0f;
  DigestResult r = computeDigest("float32", v.data(), v.size() * 4);
  EXPECT_TRUE(std::signbit(r.min));
  v[0] = 0.0f;  // now +0 comes first
  r = computeDigest("float32", v.data(), v.size() * 4);
  EXPECT_FALSE(std::signbit(r.min));
}

TEST(TensorDigest, EveryWidthOfThisCpuIsListedWidestFirst) {
  std::vector<unsigned> widths = digestVectorWidths();
  ASSERT_FALSE(widths.empty());
  EXPECT_EQ(widths.back(), 16u);  // the baseline runs everywhere
  for (size_t i = 1; i < widths.size(); ++i) EXPECT_GT(widths[i - 1], widths[i]);
}

TEST(TensorDigest, AWidthThisCpuDoesNotRunFallsBackToTheBaseline) {
  // 48 is no kernel's width; 64 (AVX-512) or 32 (AVX2) on a CPU without them would fault: both
  // take the baseline kernel, with the same figures.
  std::vector<float> v(70000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 97) - 40.5f;
  const DigestResult want = computeDigestWithWidth(16, "float32", v.data(), v.size() * 4);
  std::vector<unsigned> others = {48, 0};
  for (unsigned w : {64u, 32u}) {
    auto widths = digestVectorWidths();
    if (std::find(widths.begin(), widths.end(), w) == widths.end()) others.push_back(w);
  }
  for (unsigned w : others) {
    DigestResult got = computeDigestWithWidth(w, "float32", v.data(), v.size() * 4);
    EXPECT_EQ(got.hash, want.hash) << w;
    EXPECT_EQ(got.min, want.min) << w;
    EXPECT_EQ(got.max, want.max) << w;
  }
}

TEST(TensorDigest, NanCanonicalHashOfALargeTensorIsThatOfItsCanonicalBytes) {
  // One pass of chunks for the statistics and the raw hash; the canonical hash of a tensor
  // with NaNs of another payload equals the hash of the same tensor with the canonical NaN.
  std::vector<float> v(100000), canonical;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (auto& x : v) x = normal(rng);
  canonical = v;
  uint32_t payload = 0x7FC00123u, quiet = 0x7FC00000u;
  for (size_t i : {size_t{5}, size_t{4096}, size_t{99999}}) {
    std::memcpy(&v[i], &payload, 4);
    std::memcpy(&canonical[i], &quiet, 4);
  }
  for (unsigned w : digestVectorWidths()) {
    DigestResult a = computeDigestWithWidth(w, "float32", v.data(), v.size() * 4);
    DigestResult b = computeDigestWithWidth(w, "float32", canonical.data(), canonical.size() * 4);
    EXPECT_EQ(a.nanCount, 3u) << w;
    EXPECT_EQ(a.hash, b.hash) << w;
    EXPECT_NE(a.rawHash, b.rawHash) << w;
    EXPECT_EQ(b.hash, hash64(canonical.data(), canonical.size() * 4)) << w;
  }
}

// computeDigestAndCopy (the failure ring's copy made by the digest's pass) against the
// separate routines: computeDigest, then a memcpy. Every figure, and the copied bytes, must be
// the same for any size (around the 64-byte vector part, the 16 KB chunks and the 64 KB
// one-pass size), any alignment of source and destination, any dtype, and a NaN or an Inf at
// the first, a middle or the last element; nothing outside the destination is written.
TEST(TensorDigest, DigestAndCopyMatchesDigestThenCopy) {
  std::mt19937 rng(11);
  std::normal_distribution<double> normal(0.0, 1.0);
  const uint32_t f32Specials[] = {0x7FC00000u, 0xFFC00123u, 0x7F800000u, 0xFF800000u};
  const uint64_t f64Specials[] = {0x7FF8000000000000ull, 0x7FF0000000000000ull, 0xFFF0000000000000ull};
  const uint16_t f16Specials[] = {0x7E00u, 0x7C00u, 0xFC00u, 0x7F80u, 0xFFC1u};
  const size_t sizes[] = {0,     1,     3,     4,     8,     63,    64,    65,    100,   1000,  16383,
                          16384, 16385, 65532, 65535, 65536, 65537, 65540, 81920, 81927, 300001};
  size_t checked = 0;
  for (const char* dtype : {"float32", "float64", "float16", "bfloat16", "int64", "int32", "uint8", "bool", "weird"}) {
    const unsigned elem = std::max(1u, dtypeElemSize(dtype));
    for (size_t nbytes : sizes) {
      for (size_t srcOff : {size_t{0}, size_t{1}, size_t{4}, size_t{8}}) {
        const size_t dstOff = (srcOff * 3 + nbytes) % 7;
        const size_t n = nbytes / elem;
        // -1: no special value; else the index of the element given one.
        for (long at : {-1L, 0L, static_cast<long>(n / 2), static_cast<long>(n) - 1}) {
          if (at >= static_cast<long>(n)) continue;
          std::vector<uint8_t> src(srcOff + nbytes);
          uint8_t* p = src.data() + srcOff;
          for (size_t i = 0; i < n; ++i) {
            const double g = normal(rng);
            if (std::string_view(dtype) == "float32") {
              float f = static_cast<float>(g);
              std::memcpy(p + i * 4, &f, 4);
            } else if (std::string_view(dtype) == "float64") {
              std::memcpy(p + i * 8, &g, 8);
            } else {
              for (unsigned b = 0; b < elem; ++b) p[i * elem + b] = static_cast<uint8_t>(rng());
            }
          }
          for (size_t i = n * elem; i < nbytes; ++i) p[i] = static_cast<uint8_t>(rng());  // trailing bytes
          if (at >= 0) {
            uint8_t* e = p + static_cast<size_t>(at) * elem;
            if (elem == 4) std::memcpy(e, &f32Specials[rng() % std::size(f32Specials)], 4);
            if (elem == 8) std::memcpy(e, &f64Specials[rng() % std::size(f64Specials)], 8);
            if (elem == 2) std::memcpy(e, &f16Specials[rng() % std::size(f16Specials)], 2);
          }
          const std::string what = std::string(dtype) + " nbytes=" + std::to_string(nbytes) +
                                   " srcOff=" + std::to_string(srcOff) + " at=" + std::to_string(at);
          const DigestResult want = computeDigest(dtype, p, nbytes);
          if (at >= 0 && (std::string_view(dtype) == "float32" || std::string_view(dtype) == "float64")) {
            EXPECT_EQ(want.nanCount + want.infCount, 1u) << what;
          }
          std::vector<std::pair<std::string, DigestResult>> got;
          std::vector<std::vector<uint8_t>> copies;
          auto run = [&](const std::string& kernel, auto&& digest) {
            std::vector<uint8_t> dst(dstOff + nbytes + 64, 0xA5);
            got.emplace_back(kernel, digest(dst.data() + dstOff));
            copies.push_back(std::move(dst));
          };
          run("computeDigestAndCopy", [&](uint8_t* d) { return computeDigestAndCopy(dtype, p, nbytes, d); });
          for (unsigned w : digestVectorWidths())
            run("width " + std::to_string(w),
                [&](uint8_t* d) { return computeDigestWithWidth(w, dtype, p, nbytes, d); });
          for (size_t k = 0; k < got.size(); ++k) {
            const auto& [kernel, r] = got[k];
            EXPECT_EQ(r.hash, want.hash) << what << ", " << kernel;
            EXPECT_EQ(r.rawHash, want.rawHash) << what << ", " << kernel;
            EXPECT_EQ(r.nanCount, want.nanCount) << what << ", " << kernel;
            EXPECT_EQ(r.infCount, want.infCount) << what << ", " << kernel;
            EXPECT_TRUE(sameBits(r.min, want.min)) << what << ", " << kernel;
            EXPECT_TRUE(sameBits(r.max, want.max)) << what << ", " << kernel;
            const std::vector<uint8_t>& dst = copies[k];
            EXPECT_TRUE(std::equal(p, p + nbytes, dst.begin() + static_cast<long>(dstOff))) << what << ", " << kernel;
            EXPECT_TRUE(
                std::all_of(dst.begin(), dst.begin() + static_cast<long>(dstOff), [](uint8_t b) { return b == 0xA5; }))
                << what << ", " << kernel << ": wrote before the destination";
            EXPECT_TRUE(std::all_of(dst.begin() + static_cast<long>(dstOff + nbytes), dst.end(),
                                    [](uint8_t b) { return b == 0xA5; }))
                << what << ", " << kernel << ": wrote past the destination";
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 1000u);
}

}  // namespace
}  // namespace dlrr
