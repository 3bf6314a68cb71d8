#pragma once
// A usage mistake on a tool's command line (bad flag, missing or bad value). The option
// parsers throw it instead of printing and exiting, so that they can be unit-tested and
// fuzzed (tests/fuzz/fuzz_cli.cc); each tool's main prints it the way it always has.
#include <cstdio>
#include <stdexcept>

#include "tools/common/Text.h"

namespace dlrr::tools {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "TOOL: MESSAGE" and the --help hint on stderr. The message quotes the user's own text:
// escaped, so it stays one line and sends no terminal sequence.
inline void printUsageError(const char* tool, const UsageError& e) {
  std::fprintf(stderr, "%s: %s\nTry '%s --help'.\n", tool, printable(e.what()).c_str(), tool);
}

}  // namespace dlrr::tools
