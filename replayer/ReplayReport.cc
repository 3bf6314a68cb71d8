#include "replayer/ReplayReport.h"

#include <fstream>

namespace dlrr {

void ReportLines::appendEscaped(std::string_view s) {
  for (char c : s) {
    if (c == '\n')
      text_ += "\\n";
    else if (c == '\t')
      text_ += "\\t";
    else if (c == '\\')
      text_ += "\\\\";
    else
      text_ += c;
  }
}

namespace {

std::string unescape(std::string_view s) {
  std::string o;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      char c = s[++i];
      o += c == 'n' ? '\n' : c == 't' ? '\t' : c;
    } else {
      o += s[i];
    }
  }
  return o;
}

}  // namespace

std::map<std::string, std::string> parseReplayReport(std::string_view text) {
  std::map<std::string, std::string> r;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(start, nl - start);
    start = nl + 1;
    auto tab = line.find('\t');
    if (tab == std::string_view::npos) continue;
    std::string k = unescape(line.substr(0, tab)), v = unescape(line.substr(tab + 1));
    auto [it, inserted] = r.emplace(k, v);
    if (!inserted) it->second += "\n" + v;
  }
  return r;
}

std::map<std::string, std::string> readReplayReportFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return parseReplayReport(text.str());
}

}  // namespace dlrr
