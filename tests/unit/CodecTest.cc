// Byte-shuffle and zstd payload codec: exact round trips at every length, and clean errors
// (never an over-allocation) on payloads that lie.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "format/Codec.h"
#include "format/TraceError.h"

namespace dlrr {
namespace {

std::vector<uint8_t> floatsLike(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 0.02f);
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i + 4 <= n; i += 4) {
    float f = normal(rng);
    std::memcpy(&out[i], &f, 4);
  }
  for (size_t i = n / 4 * 4; i < n; ++i) out[i] = static_cast<uint8_t>(rng());
  return out;
}

TEST(Shuffle, RoundTripsAtEveryLengthAndElementSize) {
  for (size_t elem : {2u, 4u, 8u}) {
    for (size_t n = 0; n < 70; ++n) {
      auto in = floatsLike(n, static_cast<uint32_t>(n));
      std::vector<uint8_t> shuffled(n), back(n);
      byteShuffle(in.data(), n, elem, shuffled.data());
      byteUnshuffle(shuffled.data(), n, elem, back.data());
      EXPECT_EQ(back, in) << "elem " << elem << " n " << n;
    }
  }
}

TEST(Shuffle, GroupsBytesByPosition) {
  const uint8_t in[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};  // odd tail byte stays at the end
  uint8_t out[9];
  byteShuffle(in, 9, 4, out);
  const uint8_t want[9] = {1, 5, 2, 6, 3, 7, 4, 8, 9};
  EXPECT_EQ(std::memcmp(out, want, 9), 0);
}

// The scalar definition of the layout: plane b holds byte b of every element, in order.
std::vector<uint8_t> referenceShuffle(const std::vector<uint8_t>& in, size_t elem) {
  size_t count = in.size() / elem;
  std::vector<uint8_t> out(in);
  for (size_t b = 0; b < elem; ++b)
    for (size_t i = 0; i < count; ++i) out[b * count + i] = in[i * elem + b];
  return out;
}

TEST(Shuffle, MatchesTheScalarLayoutAroundEveryBlockEdge) {
  // The vector paths take 8 or 16 elements at a time: lengths around those edges, for every
  // element size (including ones with no vector path), and a long one.
  std::mt19937 rng(7);
  for (size_t elem : {1u, 2u, 3u, 4u, 8u, 16u}) {
    for (size_t n : {size_t{0}, size_t{15}, size_t{16}, size_t{63}, size_t{64}, size_t{65}, size_t{127}, size_t{128},
                     size_t{129}, size_t{255}, size_t{256}, size_t{257}, size_t{1000}, size_t{98304}, size_t{98305}}) {
      std::vector<uint8_t> in(n);
      for (auto& b : in) b = static_cast<uint8_t>(rng());
      std::vector<uint8_t> shuffled(n), back(n);
      byteShuffle(in.data(), n, elem, shuffled.data());
      EXPECT_EQ(shuffled, referenceShuffle(in, elem)) << "elem " << elem << " n " << n;
      byteUnshuffle(shuffled.data(), n, elem, back.data());
      EXPECT_EQ(back, in) << "elem " << elem << " n " << n;
    }
  }
}

TEST(PayloadCodec, RoundTripsWithEveryShuffleAndOddLengths) {
  PayloadCodec codec(1);
  for (uint8_t shuffle : {0, 2, 4, 8}) {
    for (size_t n : {0u, 1u, 3u, 7u, 9u, 1001u, 4097u, 65539u}) {
      auto raw = floatsLike(n, static_cast<uint32_t>(n + shuffle));
      std::vector<uint8_t> enc;
      Codec used = codec.encode(raw.data(), raw.size(), Codec{Compression::Zstd, shuffle}, enc);
      std::vector<uint8_t> dec;
      codec.decode(used, enc.data(), enc.size(), raw.size(), dec);
      EXPECT_EQ(dec, raw) << "shuffle " << int(shuffle) << " n " << n;
    }
  }
}

TEST(PayloadCodec, CompressibleDataIsCompressedAndRandomDataStoredRaw) {
  PayloadCodec codec(1);
  std::vector<uint8_t> zeros(1 << 16, 0), enc;
  Codec used = codec.encode(zeros.data(), zeros.size(), Codec{Compression::Zstd, 4}, enc);
  EXPECT_EQ(used.compression, Compression::Zstd);
  EXPECT_EQ(used.shuffle, 4);
  EXPECT_LT(enc.size(), zeros.size() / 10);

  std::mt19937 rng(1);
  std::vector<uint8_t> noise(1 << 16);
  for (auto& b : noise) b = static_cast<uint8_t>(rng());
  enc.clear();
  used = codec.encode(noise.data(), noise.size(), Codec{Compression::Zstd, 0}, enc);
  EXPECT_EQ(used.compression, Compression::None);  // never stored larger than raw
  EXPECT_EQ(enc, noise);
}

TEST(PayloadCodec, LyingLengthsAreCorruptNotAllocations) {
  PayloadCodec codec(1);
  auto raw = floatsLike(4096, 3);
  std::vector<uint8_t> enc, dec;
  Codec used = codec.encode(raw.data(), raw.size(), Codec{Compression::Zstd, 4}, enc);
  ASSERT_EQ(used.compression, Compression::Zstd);
  auto expectCorrupt = [&](Codec c, const std::vector<uint8_t>& stored, size_t rawLen) {
    try {
      codec.decode(c, stored.data(), stored.size(), rawLen, dec);
      ADD_FAILURE() << "decoded a lying payload";
    } catch (const TraceError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Corrupt);
    }
  };
  expectCorrupt(used, enc, raw.size() + 1);     // declared size disagrees with the frame
  expectCorrupt(used, enc, kMaxRawLen);         // a large claim is refused before allocating
  expectCorrupt(Codec{}, enc, enc.size() + 1);  // uncompressed: stored != raw
  auto garbage = enc;
  for (size_t i = 8; i < garbage.size(); ++i) garbage[i] ^= 0x5a;
  expectCorrupt(used, garbage, raw.size());
  std::vector<uint8_t> empty;
  expectCorrupt(used, empty, 10);
}

}  // namespace
}  // namespace dlrr
