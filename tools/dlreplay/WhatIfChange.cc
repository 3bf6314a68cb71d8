#include "tools/dlreplay/WhatIfChange.h"

#include <cstdlib>

#include "tools/common/UsageError.h"

namespace dlrr {
namespace {

constexpr const char* kKinds = "drop-sample=INDEX, skip-step, lr-scale=F, clip-grad=F, fp32 or anomaly";

bool positiveNumber(const std::string& v) {
  if (v.empty()) return false;
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  return end && *end == '\0' && d > 0 && d < 1e300;
}

bool index(const std::string& v) {
  if (v.empty() || v.size() > 18) return false;
  for (char c : v)
    if (c < '0' || c > '9') return false;
  return true;
}

}  // namespace

WhatIf parseWhatIf(const std::string& text) {
  WhatIf w;
  auto eq = text.find('=');
  w.kind = text.substr(0, eq);
  w.value = eq == std::string::npos ? "" : text.substr(eq + 1);
  bool ok = false;
  if (w.kind == "skip-step" || w.kind == "fp32" || w.kind == "anomaly")
    ok = eq == std::string::npos;
  else if (w.kind == "drop-sample")
    ok = index(w.value);
  else if (w.kind == "lr-scale" || w.kind == "clip-grad")
    ok = positiveNumber(w.value);
  if (!ok) throw tools::UsageError("--what-if takes " + std::string(kKinds) + " (got '" + text + "')");
  return w;
}

}  // namespace dlrr
