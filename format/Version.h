#pragma once
namespace dlrr {
inline constexpr const char* kDlrrVersion = "0.1.0";
}
