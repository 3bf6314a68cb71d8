#pragma once
// The one error type of the format layer. Each kind maps to a distinct, documented exit code
// of the tools (docs/cli.md), so scripts can tell "not a trace" from "damaged trace".
#include <stdexcept>
#include <string>

namespace dlrr {

enum class ErrorKind {
  Io = 1,         // the OS refused: missing file, permission, disk full
  NotATrace,      // wrong kind of file or directory
  FutureVersion,  // written by a newer dlrr with an incompatible major version
  Corrupt,        // checksums or structure do not hold
  Usage,          // a bad argument to an API or tool
  NotFound,       // a named item (step, tensor, field) is not in the trace
};

class TraceError : public std::runtime_error {
 public:
  TraceError(ErrorKind kind, const std::string& what, bool torn = false)
      : std::runtime_error(what), kind_(kind), torn_(torn) {}
  ErrorKind kind() const noexcept { return kind_; }
  // A stream cut short while its writer created it (killed, disk full): it holds nothing
  // recorded, and is what a crash at startup leaves rather than damage (kind Corrupt).
  bool torn() const noexcept { return torn_; }

 private:
  ErrorKind kind_;
  bool torn_ = false;
};

const char* errorKindName(ErrorKind k) noexcept;

}  // namespace dlrr
