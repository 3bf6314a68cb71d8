#pragma once
// Error reporting for dltrace (arguments: tools/common/Args.h; exit codes: tools/common/ExitCodes.h).
#include <cstdint>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "format/TraceError.h"
#include "tools/common/Args.h"  // OptSpec, Args
#include "tools/common/ExitCodes.h"
#include "tools/common/UsageError.h"

namespace dlrr::tools {

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
