#include "format/Hash.h"

#include "format/XxhDispatch.h"

namespace dlrr {

Hash128 hash128(const void* data, size_t n) noexcept {
  XXH128_hash_t h = DLRR_XXH3_128(data, n);
  return {h.low64, h.high64};
}

uint64_t hash64(const void* data, size_t n) noexcept { return DLRR_XXH3_64(data, n); }

}  // namespace dlrr
