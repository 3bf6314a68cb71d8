#include "replayer/ProcessMatch.h"

#include <cctype>

namespace dlrr {
namespace {

std::string baseName(const std::string& p) {
  auto s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

bool isMultiprocessingCode(const std::string& arg) { return arg.rfind("from multiprocessing.", 0) == 0; }

// Digit runs collapsed to one '#': spawn_main(tracker_fd=#, pipe_handle=#).
std::string withoutNumbers(const std::string& s) {
  std::string o;
  for (size_t i = 0; i < s.size(); ++i) {
    if (std::isdigit(static_cast<unsigned char>(s[i]))) {
      o += '#';
      while (i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1]))) ++i;
    } else {
      o += s[i];
    }
  }
  return o;
}

}  // namespace

bool sameCommand(const std::vector<std::string>& recorded, const std::vector<std::string>& replayed) {
  if (recorded.size() != replayed.size() || recorded.empty()) return false;
  if (baseName(recorded[0]) != baseName(replayed[0])) return false;
  for (size_t i = 1; i < recorded.size(); ++i) {
    if (recorded[i] == replayed[i]) continue;
    if (!isMultiprocessingCode(recorded[i]) || withoutNumbers(recorded[i]) != withoutNumbers(replayed[i])) return false;
  }
  return true;
}

bool isMultiprocessingChild(const std::vector<std::string>& argv) {
  for (const auto& a : argv)
    if (isMultiprocessingCode(a)) return true;
  return false;
}

}  // namespace dlrr
