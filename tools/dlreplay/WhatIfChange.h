#pragma once
// dlreplay --what-if's argument: the one change a what-if replay applies (WhatIf.h runs it).
// Apart from WhatIf.cc so that the option parser (and its fuzz target) needs nothing else.
#include <string>

namespace dlrr {

// One change: drop-sample=I, skip-step, lr-scale=F, clip-grad=F, fp32, anomaly.
struct WhatIf {
  std::string kind;
  std::string value;  // "" for the kinds without one
  std::string text() const { return value.empty() ? kind : kind + "=" + value; }
};

// Throws tools::UsageError naming the kinds.
WhatIf parseWhatIf(const std::string& text);

}  // namespace dlrr
