#pragma once
// CRC32C (Castagnoli), the checksum of every frame. Hardware (SSE4.2) when the CPU has it,
// a table otherwise; both give identical results.
#include <cstddef>
#include <cstdint>

namespace dlrr {

// Extends `crc` (0 for a fresh checksum) over `n` bytes. Async-signal-safe.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0) noexcept;

}  // namespace dlrr
