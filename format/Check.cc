#include "format/Check.h"

namespace dlrr::check_detail {

std::string_view nextName(std::string_view& names) {
  int depth = 0;
  size_t i = 0;
  for (; i < names.size(); ++i) {
    char c = names[i];
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') --depth;
    if (c == ',' && depth <= 0) break;
  }
  std::string_view name = names.substr(0, i);
  names.remove_prefix(i < names.size() ? i + 1 : i);
  while (!names.empty() && names.front() == ' ') names.remove_prefix(1);
  return name;
}

void assertFailed(const char* file, int line, const char* cond, const std::string& context) {
  // The path from the source tree's root: the build may be anywhere.
  std::string_view f(file);
  for (const char* root :
       {"/format/", "/recorder/", "/replayer/", "/interpose/", "/session/", "/triage/", "/tools/", "/tests/"}) {
    if (auto at = f.rfind(root); at != std::string_view::npos) {
      f.remove_prefix(at + 1);
      break;
    }
  }
  throw InternalError(std::string(f) + ":" + std::to_string(line) + ": assertion failed: " + cond + context);
}

void requireFailed(ErrorKind kind, const std::string& what, const std::string& context) {
  throw TraceError(kind, what + context);
}

}  // namespace dlrr::check_detail
