#include "tools/dlreplay/ReportJson.h"

#include <charconv>
#include <cstdint>

namespace dlrr {

void writeReportJson(tools::JsonWriter& j, const ReplayReport& r) {
  j.beginObject();
  for (const auto& [k, v] : reportEntries(r)) {
    j.key(k);
    int64_t n = 0;
    const char* end = v.data() + v.size();
    if (!isIntegerEntry(k)) {
      j.value(v);
    } else if (auto [p, ec] = std::from_chars(v.data(), end, n); ec == std::errc() && p == end && !v.empty()) {
      j.value(n);
    } else if (v == "-") {
      j.null();  // the hook's "between steps"
    } else {
      j.value(v);  // not an integer after all (a hook from another version): kept, never dropped
    }
  }
  j.endObject();
}

}  // namespace dlrr
