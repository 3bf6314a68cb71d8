#pragma once
// Names an instruction pointer from the text of /proc/self/maps ("libfoo.so+0x1234": the
// mapped file and the offset in it), for the native stack of a fatal signal. Async-signal-safe:
// no allocation, no locks; the caller reads the maps text into preallocated memory.
#include <cstddef>
#include <cstdint>

namespace dlrr {

// Writes the name of `ip` into `out` (cap >= 21), NUL-terminated, and returns its length
// without the NUL. An address outside every mapping is written as bare hex ("0x7f...").
size_t describeIp(uint64_t ip, const char* maps, size_t mapsLen, char* out, size_t cap) noexcept;

// Reads up to `cap` bytes of `path` (e.g. /proc/self/maps) or of `fd` from its start, into
// `buf`; returns how many. Async-signal-safe; 0 when it cannot be read.
size_t readFileInto(const char* path, char* buf, size_t cap) noexcept;
size_t readFdInto(int fd, char* buf, size_t cap) noexcept;

}  // namespace dlrr
