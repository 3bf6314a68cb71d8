#include "format/Redact.h"

#include <algorithm>
#include <cctype>

namespace dlrr {

std::vector<std::string> defaultRedactPatterns() {
  return {"TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL", "AUTH", "COOKIE", "SESSION"};
}

std::vector<std::string> parseRedactPatterns(std::string_view spec) {
  std::vector<std::string> out;
  if (!spec.empty() && spec.front() == '+') {
    out = defaultRedactPatterns();
    spec.remove_prefix(1);
  }
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    if (comma == std::string_view::npos) comma = spec.size();
    std::string part(spec.substr(start, comma - start));
    part.erase(std::remove_if(part.begin(), part.end(), [](unsigned char c) { return std::isspace(c); }), part.end());
    if (!part.empty()) out.push_back(part);
    start = comma + 1;
  }
  return out;
}

bool isSecretName(std::string_view name, const std::vector<std::string>& patterns) {
  std::string upper(name);
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  for (const auto& p : patterns) {
    std::string up(p);
    std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return std::toupper(c); });
    if (!up.empty() && upper.find(up) != std::string::npos) return true;
  }
  return false;
}

}  // namespace dlrr
