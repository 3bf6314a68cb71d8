#pragma once
// What dlrecord says when the job has ended: notes the recording left in the trace that the
// status pipe did not already deliver, then one summary line (steps, size, the first failure).
#include <string>
#include <vector>

namespace dlrr {

// The lines to print on stderr, each already prefixed "dlrecord: " (a trace that cannot be read
// back gets one line saying so). `shown`: the problems dlrecord has already printed.
std::vector<std::string> recordSummary(const std::string& trace, const std::vector<std::string>& shown);

}  // namespace dlrr
