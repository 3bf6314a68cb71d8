#pragma once
// Bit-exact digest of a tensor's bytes plus the health figures a NaN hunt needs. float32 and
// float64 tensors of 64 KB or more are hashed and scanned in one pass of cache-sized chunks.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace dlrr {

struct DigestResult {
  // XXH3-64 of the bytes with every NaN of a float tensor written as the dtype's one quiet NaN:
  // non-finite values compare by class (NaN, +Inf, -Inf), not by bits (a NaN's payload and
  // sign depend on the kernel that made it: compiled and eager code differ). Every other bit
  // counts. Equals rawHash when the tensor holds no NaN, or only canonical ones.
  uint64_t hash = 0;
  uint64_t rawHash = 0;   // XXH3-64 of the bytes as they are (what traces before this recorded)
  uint64_t nanCount = 0;  // complex dtypes: of their real and imaginary parts
  uint64_t infCount = 0;
  double min = 0;  // over finite values (complex: finite parts); NaN when none
  double max = 0;
};

// Element size of a torch dtype name ("float32", "int64", ...); 0 when unknown.
unsigned dtypeElemSize(std::string_view dtype) noexcept;
bool dtypeIsFloat(std::string_view dtype) noexcept;

DigestResult computeDigest(std::string_view dtype, const void* data, size_t nbytes) noexcept;
// computeDigest that also copies the nbytes to `copyTo` (the failure ring's buffer, not
// overlapping `data`; null: no copy). float32/float64 tensors are read once: each chunk is
// scanned, hashed and copied while it is in the first-level cache. Same result as computeDigest.
DigestResult computeDigestAndCopy(std::string_view dtype, const void* data, size_t nbytes, void* copyTo) noexcept;

// The float kernels' vector widths in bytes that this CPU runs, widest first (64: AVX-512,
// 32: AVX2, 16: the baseline); computeDigest uses the first. computeDigestWithWidth runs the
// kernel of one of them (any other width, one this CPU cannot run included: the baseline's),
// so that tests can check that every width gives the same figures.
std::vector<unsigned> digestVectorWidths();
DigestResult computeDigestWithWidth(unsigned width, std::string_view dtype, const void* data, size_t nbytes,
                                    void* copyTo = nullptr) noexcept;

}  // namespace dlrr
