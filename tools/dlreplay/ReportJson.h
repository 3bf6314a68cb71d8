#pragma once
// dlreplay --json's "report" object: reportEntries typed for JSON readers. Integer entries are
// JSON numbers (the hook's "stop.step" is null between steps, where the text says "-"); the
// rest are strings, a list one value a line as in the text output.
#include "replayer/ReplayReport.h"
#include "tools/common/Json.h"

namespace dlrr {

// Writes the report as the current value of `j` (an object; {} when there is no report).
void writeReportJson(tools::JsonWriter& j, const ReplayReport& r);

}  // namespace dlrr
