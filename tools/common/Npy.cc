#include "tools/common/Npy.h"

#include <array>

namespace dlrr::tools {

std::optional<NpyDtype> npyDtypeForTorch(std::string_view dtype) {
  struct Entry {
    std::string_view torch;
    const char* descr;
    size_t size;
  };
  static constexpr std::array<Entry, 14> kTable = {{
      {"float32", "<f4", 4},
      {"float", "<f4", 4},
      {"float64", "<f8", 8},
      {"double", "<f8", 8},
      {"float16", "<f2", 2},
      {"half", "<f2", 2},
      {"int8", "|i1", 1},
      {"uint8", "|u1", 1},
      {"int16", "<i2", 2},
      {"int32", "<i4", 4},
      {"int64", "<i8", 8},
      {"bool", "|b1", 1},
      {"complex64", "<c8", 8},
      {"complex128", "<c16", 16},
  }};
  for (const auto& e : kTable)
    if (e.torch == dtype) return NpyDtype{e.descr, e.size, ""};
  if (dtype == "uint16") return NpyDtype{"<u2", 2, ""};
  if (dtype == "uint32") return NpyDtype{"<u4", 4, ""};
  if (dtype == "uint64") return NpyDtype{"<u8", 8, ""};
  if (dtype == "bfloat16")
    return NpyDtype{"<u2", 2,
                    "bfloat16 has no NumPy dtype: wrote its raw bits as uint16; "
                    "view as float32 with (a.astype(np.uint32) << 16).view(np.float32)"};
  if (dtype.rfind("float8", 0) == 0)
    return NpyDtype{"|u1", 1, std::string(dtype) + " has no NumPy dtype: wrote its raw bits as uint8"};
  return std::nullopt;
}

std::string npyHeader(const std::string& descr, const std::vector<int64_t>& shape) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) dict += ", ";
    dict += std::to_string(shape[i]);
  }
  if (shape.size() == 1) dict += ",";
  dict += "), }";
  // magic (6) + version (2) + header length (2) + dict + padding + '\n', a multiple of 64.
  size_t total = 10 + dict.size() + 1;
  size_t padded = (total + 63) / 64 * 64;
  dict.append(padded - total, ' ');
  dict += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>((dict.size() >> 8) & 0xff);
  out += dict;
  return out;
}

}  // namespace dlrr::tools
