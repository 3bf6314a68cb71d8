#pragma once
// Flattens a recorded batch (schema::Value with blob references) into one self-describing
// byte string the Python hook decodes with `struct` alone: no pickle, nothing executable.
//   'N' | 'B' u8 | 'I' i64 | 'F' f64 | 'S' u32 len bytes | 'Y' u32 len bytes | 'O' u32 len name
//   'L'/'T' u32 n values... | 'D' u32 n (u32 keylen key value)...
//   'X' u32 dtypelen dtype u32 ndim i64[ndim] u8 requires_grad u32 devlen device u64 nbytes bytes
// All integers little-endian.
#include <cstdint>
#include <functional>
#include <vector>

#include "format/Hash.h"
#include "schema/dlrr.capnp.h"

namespace dlrr {

using BlobLoader = std::function<std::vector<uint8_t>(const Hash128&, uint64_t)>;

void encodeValue(schema::Value::Reader v, const BlobLoader& load, std::vector<uint8_t>& out, int depth = 0);

}  // namespace dlrr
