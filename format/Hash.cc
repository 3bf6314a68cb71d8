#include "format/Hash.h"

#include <xxhash.h>

namespace dlrr {

Hash128 hash128(const void* data, size_t n) noexcept {
  XXH128_hash_t h = XXH3_128bits(data, n);
  return {h.low64, h.high64};
}

uint64_t hash64(const void* data, size_t n) noexcept { return XXH3_64bits(data, n); }

}  // namespace dlrr
