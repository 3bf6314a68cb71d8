#pragma once
// Writes what report and export produce to FILE ("-": stdout); errors are TraceError(Io).
#include <string>

namespace dlrr::tools {

void writeOutputFile(const std::string& file, const std::string& content);

}  // namespace dlrr::tools
