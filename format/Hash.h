#pragma once
// Content hashes: XXH3-128 names blobs (content addressing), XXH3-64 is the bit-exact tensor
// digest. Both are stable across platforms and versions of xxHash >= 0.8.
#include <cstddef>
#include <cstdint>
#include <functional>

namespace dlrr {

struct Hash128 {
  uint64_t lo = 0;
  uint64_t hi = 0;
  friend bool operator==(const Hash128&, const Hash128&) = default;
};

struct Hash128Hasher {
  size_t operator()(const Hash128& h) const noexcept {
    return static_cast<size_t>(h.lo ^ (h.hi * 0x9E3779B97F4A7C15ull));
  }
};

Hash128 hash128(const void* data, size_t n) noexcept;
uint64_t hash64(const void* data, size_t n) noexcept;

}  // namespace dlrr
