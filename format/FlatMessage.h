#pragma once
// The flat framing of a one-segment Cap'n Proto message, as capnp::writeMessage writes it: an
// 8-byte segment table (segment count - 1, i.e. 0, then the segment's size in words), then the
// segment's words. Written by hand where a message is appended to a buffer with no stream (the
// writer's events items, per event) or where nothing may allocate (the crash handler).
#include <bit>
#include <cstdint>
#include <cstring>

namespace dlrr {

constexpr size_t kOneSegmentTableBytes = 8;

// Writes the segment table of a one-segment message of `words` words to `out`.
inline void writeOneSegmentTable(uint8_t* out, uint32_t words) noexcept {
  static_assert(std::endian::native == std::endian::little, "Cap'n Proto's segment table is little-endian");
  const uint32_t table[2] = {0, words};
  std::memcpy(out, table, kOneSegmentTableBytes);
}

}  // namespace dlrr
