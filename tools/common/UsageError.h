#pragma once
// A usage mistake on a tool's command line (bad flag, missing or bad value). The option
// parsers throw it instead of printing and exiting, so that they can be unit-tested and
// fuzzed (tests/fuzz/fuzz_cli.cc); each tool's main prints it the way it always has.
#include <stdexcept>

namespace dlrr::tools {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace dlrr::tools
