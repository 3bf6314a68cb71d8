// The byte-level framing: headers, trailers and blob prefixes encode, decode, and reject
// every kind of damage.
#include <gtest/gtest.h>

#include <cstring>

#include "format/Crc32c.h"
#include "format/Frame.h"

namespace dlrr {
namespace {

FrameHeader sampleHeader() {
  FrameHeader h;
  h.kind = FrameKind::Blob;
  h.codec = Codec{Compression::Zstd, 4}.encode();
  h.flags = kFrameFlagAsync;
  h.seq = 0x0102030405060708ull;
  h.storedLen = 1000;
  h.rawLen = 4000;
  h.payloadCrc = 0xdeadbeef;
  return h;
}

TEST(Frame, HeaderRoundTripsAndIsLittleEndian) {
  uint8_t b[kFrameHeaderSize];
  encodeFrameHeader(sampleHeader(), b);
  EXPECT_EQ(std::memcmp(b, "DLRF", 4), 0);
  EXPECT_EQ(b[4], 3);     // kind
  EXPECT_EQ(b[5], 0x41);  // zstd | shuffle 4 << 4
  EXPECT_EQ(b[6], 1);     // flags, low byte first
  EXPECT_EQ(b[8], 0x08);  // seq, low byte first
  EXPECT_EQ(b[16], 1000 & 0xff);
  FrameHeader d;
  ASSERT_EQ(decodeFrameHeader(b, d), HeaderStatus::Ok);
  FrameHeader s = sampleHeader();
  EXPECT_EQ(d.kind, s.kind);
  EXPECT_EQ(d.codec, s.codec);
  EXPECT_EQ(d.flags, s.flags);
  EXPECT_EQ(d.seq, s.seq);
  EXPECT_EQ(d.storedLen, s.storedLen);
  EXPECT_EQ(d.rawLen, s.rawLen);
  EXPECT_EQ(d.payloadCrc, s.payloadCrc);
}

TEST(Frame, EveryBitFlipInAHeaderIsRejected) {
  uint8_t good[kFrameHeaderSize];
  encodeFrameHeader(sampleHeader(), good);
  for (size_t bit = 0; bit < kFrameHeaderSize * 8; ++bit) {
    uint8_t b[kFrameHeaderSize];
    std::memcpy(b, good, sizeof b);
    b[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    FrameHeader d;
    EXPECT_NE(decodeFrameHeader(b, d), HeaderStatus::Ok) << "bit " << bit;
  }
}

TEST(Frame, FieldsAreValidatedEvenWithAGoodCrc) {
  auto check = [](FrameHeader h) {
    uint8_t b[kFrameHeaderSize];
    encodeFrameHeader(h, b);
    FrameHeader d;
    return decodeFrameHeader(b, d);
  };
  FrameHeader h = sampleHeader();
  h.kind = static_cast<FrameKind>(9);
  EXPECT_EQ(check(h), HeaderStatus::BadField);
  h = sampleHeader();
  h.codec = 0x32;  // shuffle 3 is not a codec
  EXPECT_EQ(check(h), HeaderStatus::BadField);
  h = sampleHeader();
  h.codec = 0x02;  // compression 2 does not exist
  EXPECT_EQ(check(h), HeaderStatus::BadField);
  h = sampleHeader();
  h.storedLen = kMaxStoredLen + 1;
  EXPECT_EQ(check(h), HeaderStatus::BadField);
  h = sampleHeader();
  h.rawLen = kMaxRawLen + 1;
  EXPECT_EQ(check(h), HeaderStatus::BadField);
  h = sampleHeader();
  h.storedLen = kBlobPrefixSize - 1;  // a blob frame always carries its prefix
  EXPECT_EQ(check(h), HeaderStatus::BadField);
  uint8_t b[kFrameHeaderSize] = {};
  FrameHeader d;
  EXPECT_EQ(decodeFrameHeader(b, d), HeaderStatus::BadMagic);
}

TEST(Frame, FileHeaderAndTrailer) {
  uint8_t fh[kFileHeaderSize];
  encodeFileHeader(fh);
  EXPECT_EQ(std::memcmp(fh, "DLRRSTRM", 8), 0);
  auto info = decodeFileHeader(fh);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->major, 1);  // a stream without bulk files: readable by dlrr before them
  EXPECT_EQ(info->minor, kFormatMinor);
  encodeFileHeader(fh, kFormatMajor);
  EXPECT_EQ(decodeFileHeader(fh)->major, 2);
  fh[0] = 'X';
  EXPECT_FALSE(decodeFileHeader(fh));

  uint8_t t[kTrailerSize];
  encodeTrailer(0x123456789aull, t);
  EXPECT_EQ(std::memcmp(t, "DLRRTAIL", 8), 0);
  ASSERT_TRUE(decodeTrailer(t));
  EXPECT_EQ(*decodeTrailer(t), 0x123456789aull);
  for (size_t bit = 0; bit < 20 * 8; ++bit) {  // magic, offset and CRC are all checked
    uint8_t c[kTrailerSize];
    std::memcpy(c, t, sizeof c);
    c[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_FALSE(decodeTrailer(c)) << "bit " << bit;
  }
}

TEST(Frame, BlobPrefixRoundTrips) {
  BlobPrefix p{1, 2, 3ull << 40, 16u << 20};
  uint8_t b[kBlobPrefixSize];
  encodeBlobPrefix(p, b);
  BlobPrefix d = decodeBlobPrefix(b);
  EXPECT_EQ(d.hashLo, 1u);
  EXPECT_EQ(d.hashHi, 2u);
  EXPECT_EQ(d.totalSize, 3ull << 40);
  EXPECT_EQ(d.chunkOffset, 16u << 20);
}

TEST(Frame, CodecByteEncoding) {
  for (uint8_t shuffle : {0, 2, 4, 8}) {
    for (auto c : {Compression::None, Compression::Zstd}) {
      Codec codec{c, shuffle};
      auto d = Codec::decode(codec.encode());
      ASSERT_TRUE(d);
      EXPECT_EQ(d->compression, c);
      EXPECT_EQ(d->shuffle, shuffle);
    }
  }
  EXPECT_FALSE(Codec::decode(0x11));
  EXPECT_FALSE(Codec::decode(0x03));
}

TEST(Crc32c, KnownVectors) {
  // RFC 3720 B.4 test vectors.
  uint8_t zeros[32] = {};
  EXPECT_EQ(crc32c(zeros, sizeof zeros), 0x8A9136AAu);
  uint8_t ones[32];
  std::memset(ones, 0xff, sizeof ones);
  EXPECT_EQ(crc32c(ones, sizeof ones), 0x62A8AB43u);
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  // Extending in pieces equals one pass.
  EXPECT_EQ(crc32c("6789", 4, crc32c("12345", 5)), 0xE3069283u);
}

}  // namespace
}  // namespace dlrr
