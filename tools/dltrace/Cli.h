#pragma once
// Exit codes and error reporting for dltrace (arguments: tools/common/Args.h). The exit-code table lives
// here and in docs/cli.md; exitCodeFor() is the one place TraceError kinds become exit codes.
#include <cstdint>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "format/TraceError.h"
#include "tools/common/Args.h"  // OptSpec, Args
#include "tools/common/UsageError.h"

namespace dlrr::tools {

enum ExitCode : int {
  kExitOk = 0,
  kExitNegative = 1,       // verify found damage; a command-specific negative result
  kExitUsage = 2,          // bad flags, missing arguments, unknown command
  kExitIo = 3,             // missing path, permission denied, cannot write output
  kExitNotATrace = 4,      // the path is not a dlrr trace
  kExitFutureVersion = 5,  // written by a newer dlrr (trace format major version)
  kExitCorrupt = 6,        // damaged beyond what recovery can read
  kExitNotFound = 7,       // no such step, stream, tensor, field
  kExitInternal = 8,       // a bug in dltrace
};

int exitCodeFor(ErrorKind kind) noexcept;

// UsageError (tools/common/UsageError.h): main prints the message, the command's usage line
// and a --help hint.

// Buffered stdout; write errors (EPIPE, ENOSPC) surface as TraceError(Io) at flush().
class Output {
 public:
  explicit Output(std::FILE* f = stdout) : f_(f) {}
  void write(const std::string& s);
  void line(const std::string& s) {
    write(s);
    write("\n");
  }
  void flush();

 private:
  std::FILE* f_;
};

// "dltrace: warning: ..." on stderr (one line; newlines in msg are escaped).
void warn(const std::string& msg);
std::string oneLine(const std::string& msg);

}  // namespace dlrr::tools
