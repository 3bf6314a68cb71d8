#pragma once
// The on-disk framing of a stream file (docs/format.md has the byte-level picture):
//
//   FileHeader (16 B) | Frame | Frame | ... | [Footer frame | Trailer (24 B)]
//   Frame = FrameHeader (32 B) | payload (storedLen B)
//
// Every frame carries its own CRC32C over the header and over the payload, so a reader can
// stop at the first damaged or torn frame and keep everything before it: that is how a trace
// survives `kill -9` of its writer at any byte.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace dlrr {

inline constexpr char kFileMagic[8] = {'D', 'L', 'R', 'R', 'S', 'T', 'R', 'M'};
inline constexpr char kTrailerMagic[8] = {'D', 'L', 'R', 'R', 'T', 'A', 'I', 'L'};
inline constexpr uint32_t kFrameMagic = 0x46524C44;  // "DLRF" little-endian
// Major 2: the stream's snapshots may live in bulk files (format/TraceDir.h), which a reader
// of major 1 would not look in. Only such streams (and their bulk files) say 2; every other
// stream says 1, so dlrr versions from before bulk files still read it (docs/format.md).
inline constexpr uint16_t kFormatMajor = 2;        // the newest this dlrr writes; readers refuse a larger one
inline constexpr uint16_t kFormatMajorNoBulk = 1;  // a stream without bulk files
inline constexpr uint16_t kFormatMinor = 0;        // additions only; readers accept any

inline constexpr size_t kFileHeaderSize = 16;
inline constexpr size_t kFrameHeaderSize = 32;
inline constexpr size_t kTrailerSize = 24;
inline constexpr size_t kBlobPrefixSize = 32;

// Caps on every length read from a file: a reader never allocates more than this per frame.
inline constexpr uint32_t kMaxStoredLen = 64u << 20;
inline constexpr uint32_t kMaxRawLen = 64u << 20;
// Blobs larger than this are split into several BLOB frames (chunks).
inline constexpr uint32_t kBlobChunkSize = 16u << 20;

enum class FrameKind : uint8_t {
  Header = 1,  // StreamHeader message; always the first frame
  Events = 2,  // back-to-back Event messages
  Blob = 3,    // BlobPrefix + (compressed) chunk of a content-addressed blob
  Footer = 4,  // Footer message (index); only at clean close
};

// Low nibble: compression; high nibble: byte-shuffle element size (0 = none).
enum class Compression : uint8_t { None = 0, Zstd = 1 };
struct Codec {
  Compression compression = Compression::None;
  uint8_t shuffle = 0;  // 0, 2, 4 or 8
  uint8_t encode() const noexcept { return static_cast<uint8_t>(static_cast<uint8_t>(compression) | (shuffle << 4)); }
  static std::optional<Codec> decode(uint8_t b) noexcept;
};

inline constexpr uint16_t kFrameFlagAsync = 1;  // written from a signal handler

struct FrameHeader {
  FrameKind kind = FrameKind::Events;
  uint8_t codec = 0;
  uint16_t flags = 0;
  uint64_t seq = 0;
  uint32_t storedLen = 0;   // payload bytes in the file
  uint32_t rawLen = 0;      // payload bytes after decoding (blob: chunk bytes, prefix excluded)
  uint32_t payloadCrc = 0;  // CRC32C of the stored payload
};

// Serialises `h` (computing the header CRC) into 32 bytes. Async-signal-safe.
void encodeFrameHeader(const FrameHeader& h, uint8_t out[kFrameHeaderSize]) noexcept;

enum class HeaderStatus { Ok, BadMagic, BadCrc, BadField };
// Parses and validates 32 bytes (magic, header CRC, known kind and codec, length caps).
HeaderStatus decodeFrameHeader(const uint8_t in[kFrameHeaderSize], FrameHeader& out) noexcept;

void encodeFileHeader(uint8_t out[kFileHeaderSize], uint16_t major = kFormatMajorNoBulk) noexcept;
struct FileHeaderInfo {
  uint16_t major = 0;
  uint16_t minor = 0;
};
// Returns nullopt when the magic does not match (not a dlrr stream).
std::optional<FileHeaderInfo> decodeFileHeader(const uint8_t in[kFileHeaderSize]) noexcept;

void encodeTrailer(uint64_t footerOffset, uint8_t out[kTrailerSize]) noexcept;
std::optional<uint64_t> decodeTrailer(const uint8_t in[kTrailerSize]) noexcept;

// The uncompressed prefix of a BLOB frame's payload: which blob, and where this chunk goes.
struct BlobPrefix {
  uint64_t hashLo = 0;
  uint64_t hashHi = 0;
  uint64_t totalSize = 0;
  uint64_t chunkOffset = 0;
};
void encodeBlobPrefix(const BlobPrefix& p, uint8_t out[kBlobPrefixSize]) noexcept;
BlobPrefix decodeBlobPrefix(const uint8_t in[kBlobPrefixSize]) noexcept;

const char* frameKindName(FrameKind k) noexcept;

}  // namespace dlrr
