#pragma once
// The one command-line parser of the tools (dltrace's subcommands, dlrecord, dlreplay,
// dlpreflight). It only splits and checks the shape of the arguments; what a value means is
// checked by each tool's options file, so that every parser is a pure function of argv that
// unit tests and tests/fuzz/fuzz_cli.cc drive without running anything.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tools/common/UsageError.h"

namespace dlrr::tools {

struct OptSpec {
  enum class Type {
    Flag,           // --json
    Value,          // --until nan, --until=nan
    OptionalValue,  // --batch [PATH]: the next argument is its value unless it starts with '-'
    Final,          // --help, --version: ends the parse where it stands (what came before still counts)
  };
  std::string name;  // "--output"; what has(), value() take
  Type type = Type::Flag;
  std::string alias = {};  // "-o": the same option
};

class Args {
 public:
  enum class Layout {
    Free,     // options and arguments in any order; "--" makes the rest arguments (dltrace)
    Command,  // "--" ends the options and the rest is a command to run, verbatim (dlrecord...)
  };
  // UsageError for an unknown option (quoted), a missing value, a value given to a flag, or an
  // option given twice.
  Args(const std::vector<std::string>& argv, const std::vector<OptSpec>& specs, Layout layout = Layout::Free);

  bool has(const std::string& name) const;
  std::optional<std::string> value(const std::string& name) const;  // nullopt: absent or no value
  std::optional<int64_t> intValue(const std::string& name) const;   // UsageError when not an integer
  // The value as an integer in [lo, hi] (digits only, no blanks or '+'); UsageError naming the
  // option, the range and the text otherwise.
  std::optional<int64_t> intValue(const std::string& name, int64_t lo, int64_t hi) const;
  // The Final option that ended the parse ("--help"), or empty.
  const std::string& final() const { return final_; }
  // Arguments that are not options; in the Command layout, those before "--".
  const std::vector<std::string>& positional() const { return positional_; }
  // The single TRACE argument: UsageError when missing or when there are more.
  const std::string& trace() const;
  // Command layout: whether "--" was given, and what follows it.
  bool sawDashDash() const { return sawDashDash_; }
  const std::vector<std::string>& command() const { return command_; }

 private:
  struct Seen {
    std::string name;
    std::optional<std::string> value;
  };
  std::vector<Seen> seen_;
  std::vector<std::string> positional_;
  std::vector<std::string> command_;
  std::string final_;
  bool sawDashDash_ = false;
};

}  // namespace dlrr::tools
