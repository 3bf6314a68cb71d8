#include "tools/common/FactJson.h"

#include <charconv>
#include <cstdint>

namespace dlrr::tools {
namespace {

// The hook's flags (pyhook/python/dlrr_hook/runtime.py, _flag of a bool).
constexpr std::string_view kFlags[] = {
    "torch.deterministic_algorithms",
    "torch.deterministic_algorithms.warn_only",
    "torch.deterministic.fill_uninitialized_memory",
    "cudnn.enabled",
    "cudnn.benchmark",
    "cudnn.deterministic",
    "cudnn.allow_tf32",
    "cuda.matmul.allow_tf32",
    "cuda.matmul.allow_fp16_reduced_precision_reduction",
    "cuda.matmul.allow_bf16_reduced_precision_reduction",
    "cuda.initialized",
    "cuda.available",
};
// Counts: the hook's, the launcher's (cpu.count) and dlrecord's options (ring_steps).
constexpr std::string_view kCounts[] = {
    "torch.num_threads", "torch.num_interop_threads", "cuda.device_count", "cudnn.version", "cpu.count", "ring_steps",
};

bool in(std::string_view key, const auto& table) {
  for (auto k : table)
    if (k == key) return true;
  return false;
}

// cuda.device.N.sm_count, cuda.device.N.memory.
bool deviceCount(std::string_view key) {
  constexpr std::string_view kDevice = "cuda.device.";
  if (key.substr(0, kDevice.size()) != kDevice) return false;
  return key.ends_with(".sm_count") || key.ends_with(".memory");
}

}  // namespace

void writeFactValue(JsonWriter& j, std::string_view key, const std::string& value) {
  if (in(key, kFlags) && (value == "0" || value == "1")) {
    j.value(value == "1");
    return;
  }
  if (in(key, kCounts) || deviceCount(key)) {
    int64_t n = 0;
    const char* end = value.data() + value.size();
    if (auto [p, ec] = std::from_chars(value.data(), end, n); ec == std::errc() && p == end && !value.empty()) {
      j.value(n);
      return;
    }
  }
  j.value(value);
}

}  // namespace dlrr::tools
