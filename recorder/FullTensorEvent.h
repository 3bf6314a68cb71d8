#pragma once
// The one way a tensor's bytes enter the trace: a FullTensor event referencing a blob. Used by
// full capture, the failure ring and device tensors copied to the host.
#include <cstdint>
#include <string_view>

#include "format/StreamWriter.h"
#include "schema/dlrr.capnp.h"

namespace dlrr {

// Fills `e` as a FullTensor event and puts `data` as its blob (shuffled by the dtype's element
// size). `ndim` <= 0 or a null `shape`: a scalar.
void fillFullTensor(schema::Event::Builder e, StreamWriter& w, int kind, std::string_view path, uint32_t callIndex,
                    uint32_t output, std::string_view dtype, const int64_t* shape, int ndim, const void* data,
                    uint64_t nbytes);

}  // namespace dlrr
