#include "format/Frame.h"

#include <cstring>

#include "format/Crc32c.h"

namespace dlrr {
namespace {

// Explicit little-endian helpers: the format is defined byte by byte, not by struct layout.
void put16(uint8_t* p, uint16_t v) noexcept {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void put32(uint8_t* p, uint32_t v) noexcept {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put64(uint8_t* p, uint64_t v) noexcept {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t get16(const uint8_t* p) noexcept { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t get32(const uint8_t* p) noexcept {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t get64(const uint8_t* p) noexcept {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

std::optional<Codec> Codec::decode(uint8_t b) noexcept {
  uint8_t comp = b & 0x0F;
  uint8_t shuf = b >> 4;
  if (comp > 1) return std::nullopt;
  if (shuf != 0 && shuf != 2 && shuf != 4 && shuf != 8) return std::nullopt;
  return Codec{static_cast<Compression>(comp), shuf};
}

void encodeFrameHeader(const FrameHeader& h, uint8_t out[kFrameHeaderSize]) noexcept {
  put32(out + 0, kFrameMagic);
  out[4] = static_cast<uint8_t>(h.kind);
  out[5] = h.codec;
  put16(out + 6, h.flags);
  put64(out + 8, h.seq);
  put32(out + 16, h.storedLen);
  put32(out + 20, h.rawLen);
  put32(out + 24, h.payloadCrc);
  put32(out + 28, crc32c(out, 28));
}

HeaderStatus decodeFrameHeader(const uint8_t in[kFrameHeaderSize], FrameHeader& out) noexcept {
  if (get32(in) != kFrameMagic) return HeaderStatus::BadMagic;
  if (get32(in + 28) != crc32c(in, 28)) return HeaderStatus::BadCrc;
  uint8_t kind = in[4];
  if (kind < 1 || kind > 4) return HeaderStatus::BadField;
  if (!Codec::decode(in[5])) return HeaderStatus::BadField;
  out.kind = static_cast<FrameKind>(kind);
  out.codec = in[5];
  out.flags = get16(in + 6);
  out.seq = get64(in + 8);
  out.storedLen = get32(in + 16);
  out.rawLen = get32(in + 20);
  out.payloadCrc = get32(in + 24);
  if (out.storedLen > kMaxStoredLen || out.rawLen > kMaxRawLen) return HeaderStatus::BadField;
  if (out.kind == FrameKind::Blob && out.storedLen < kBlobPrefixSize) return HeaderStatus::BadField;
  return HeaderStatus::Ok;
}

void encodeFileHeader(uint8_t out[kFileHeaderSize], uint16_t major) noexcept {
  std::memcpy(out, kFileMagic, 8);
  put16(out + 8, major);
  put16(out + 10, kFormatMinor);
  put32(out + 12, 0);
}

std::optional<FileHeaderInfo> decodeFileHeader(const uint8_t in[kFileHeaderSize]) noexcept {
  if (std::memcmp(in, kFileMagic, 8) != 0) return std::nullopt;
  return FileHeaderInfo{get16(in + 8), get16(in + 10)};
}

void encodeTrailer(uint64_t footerOffset, uint8_t out[kTrailerSize]) noexcept {
  std::memcpy(out, kTrailerMagic, 8);
  put64(out + 8, footerOffset);
  put32(out + 16, crc32c(out, 16));
  put32(out + 20, 0);
}

std::optional<uint64_t> decodeTrailer(const uint8_t in[kTrailerSize]) noexcept {
  if (std::memcmp(in, kTrailerMagic, 8) != 0) return std::nullopt;
  if (get32(in + 16) != crc32c(in, 16)) return std::nullopt;
  return get64(in + 8);
}

void encodeBlobPrefix(const BlobPrefix& p, uint8_t out[kBlobPrefixSize]) noexcept {
  put64(out + 0, p.hashLo);
  put64(out + 8, p.hashHi);
  put64(out + 16, p.totalSize);
  put64(out + 24, p.chunkOffset);
}

BlobPrefix decodeBlobPrefix(const uint8_t in[kBlobPrefixSize]) noexcept {
  return {get64(in), get64(in + 8), get64(in + 16), get64(in + 24)};
}

const char* frameKindName(FrameKind k) noexcept {
  switch (k) {
    case FrameKind::Header:
      return "header";
    case FrameKind::Events:
      return "events";
    case FrameKind::Blob:
      return "blob";
    case FrameKind::Footer:
      return "footer";
  }
  return "?";
}

}  // namespace dlrr
