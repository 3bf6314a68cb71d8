#pragma once
// Bit-exact digest of a tensor's bytes plus the health figures a NaN hunt needs. One pass for
// the hash, one for the statistics; both run at memory bandwidth on contiguous data.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace dlrr {

struct DigestResult {
  uint64_t hash = 0;
  uint64_t nanCount = 0;
  uint64_t infCount = 0;
  double min = 0;  // over finite values; NaN when none
  double max = 0;
};

// Element size of a torch dtype name ("float32", "int64", ...); 0 when unknown.
unsigned dtypeElemSize(std::string_view dtype) noexcept;
bool dtypeIsFloat(std::string_view dtype) noexcept;

DigestResult computeDigest(std::string_view dtype, const void* data, size_t nbytes) noexcept;

}  // namespace dlrr
