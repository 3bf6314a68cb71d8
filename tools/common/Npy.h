#pragma once
// NumPy .npy (format 1.0) output: a magic string, a little header dict, then the raw
// little-endian C-order data, which is exactly how a trace stores tensor bytes.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlrr::tools {

struct NpyDtype {
  std::string descr;  // e.g. "<f4"
  size_t itemSize = 0;
  std::string note;  // set when the data is stored under a stand-in dtype (bfloat16 -> <u2)
};

// Maps a torch dtype name (as recorded: "float32", "bfloat16", "int64", "bool", ...) to the
// NumPy dtype that holds the same bytes; nullopt when unknown.
std::optional<NpyDtype> npyDtypeForTorch(std::string_view dtype);

// The complete header (magic through padding and '\n'): its length is a multiple of 64.
// `shape` empty means a 0-d array (a scalar).
std::string npyHeader(const std::string& descr, const std::vector<int64_t>& shape);

}  // namespace dlrr::tools
