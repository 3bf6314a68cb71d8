#pragma once
// dlpreflight's command line: [options] -- CMD [ARGS...]. Parsing never prints or exits
// (unit-tested and fuzzed like the other tools' parsers).
#include <cstdint>
#include <string>
#include <vector>

#include "tools/common/Args.h"

namespace dlrr {

extern const char* const kPreflightUsage;

struct PreflightOptions {
  enum class Action { Run, Help, Version } action = Action::Run;
  int batches = 2;     // K: batches per DataLoader pass, updates per loop without one
  std::string output;  // the preflight trace; empty: a new directory under $TMPDIR
  bool json = false;
  bool writeThrough = false;  // the job writes in place (default: into a scratch directory)
  bool hostNetwork = false;   // --net host: the job keeps this machine's network
  std::string compare;        // an earlier preflight trace of the same job at another batch size
  int64_t targetBatch = 0;    // estimate peak memory at this batch size (with `compare`)
  std::vector<std::string> command;
};

// `args` is argv without the program name. Throws tools::UsageError.
PreflightOptions parsePreflightOptions(const std::vector<std::string>& args);

}  // namespace dlrr
