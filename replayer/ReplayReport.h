#pragma once
// The replay report: what the replayed job's library (ReplaySession) tells dlreplay at every
// step and at the stop, in the file named by DLRR_REPORT. One "key<TAB>value" line per entry,
// tabs, newlines and backslashes in keys and values escaped; a key may repeat (warnings) and
// then its values accumulate, one per line. Both sides use this file's codec: the writer in
// the job, the reader in dlreplay (readReplayReport).
#include <map>
#include <sstream>
#include <string>
#include <string_view>

namespace dlrr {

class ReportLines {
 public:
  // Adds key<TAB>value; the value is formatted with operator<< and escaped.
  template <class V>
  ReportLines& add(std::string_view key, const V& value) {
    std::ostringstream v;
    v << value;
    appendEscaped(key);
    text_ += '\t';
    appendEscaped(v.str());
    text_ += '\n';
    return *this;
  }
  const std::string& text() const { return text_; }

 private:
  void appendEscaped(std::string_view s);
  std::string text_;
};

// Entries of a report's text; repeated keys accumulate ("a\nb"). Lines without a tab (a torn
// write) are skipped.
std::map<std::string, std::string> parseReplayReport(std::string_view text);
// parseReplayReport of a report file (empty when it cannot be read).
std::map<std::string, std::string> readReplayReportFile(const std::string& path);

}  // namespace dlrr
