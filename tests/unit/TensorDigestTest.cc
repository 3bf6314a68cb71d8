#include "recorder/TensorDigest.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace dlrr {
namespace {

TEST(TensorDigest, Float32CountsAndRange) {
  std::vector<float> v = {1.5f, -2.0f, std::nanf(""), std::numeric_limits<float>::infinity(), 0.25f,
                          -std::numeric_limits<float>::infinity()};
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
  r = computeDigest("complex64", v, 8);
  EXPECT_TRUE(std::isnan(r.min));
  EXPECT_EQ(dtypeElemSize("bfloat16"), 2u);
  EXPECT_EQ(dtypeElemSize("nonsense"), 0u);
  EXPECT_TRUE(dtypeIsFloat("float64"));
  EXPECT_FALSE(dtypeIsFloat("int8"));
}

TEST(TensorDigest, EmptyTensor) {
  DigestResult r = computeDigest("float32", nullptr, 0);
  EXPECT_EQ(r.nanCount, 0u);
  EXPECT_TRUE(std::isnan(r.min));
}

}  // namespace
}  // namespace dlrr
