#pragma once
// What a trace says of the machine (TraceInfo's host, CPU, kernel), read the same way where it
// is recorded (dlrecord, the recorder) and where it is compared (triage's host probe, dlreplay's
// "recorded on another host" check), so that the two sides never differ by how they read it.
#include <string>

namespace dlrr {

std::string hostName();  // gethostname(); "" when unknown
std::string cpuModel();  // /proc/cpuinfo's first "model name"; "" when none
std::string kernelId();  // "Linux 6.1.0-18-amd64 x86_64" (uname); "" when unknown

}  // namespace dlrr
