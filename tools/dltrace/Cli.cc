#include "tools/dltrace/Cli.h"

#include <cerrno>
#include <charconv>
#include <cstring>

namespace dlrr::tools {

void Output::write(const std::string& s) {
  if (!s.empty()) std::fwrite(s.data(), 1, s.size(), f_);
}

void Output::flush() {
  if (std::fflush(f_) != 0 || std::ferror(f_)) {
    int err = errno;
    throw TraceError(ErrorKind::Io, std::string("cannot write output: ") + std::strerror(err ? err : EIO));
  }
}

std::string oneLine(const std::string& msg) {
  std::string out;
  out.reserve(msg.size());
  for (char c : msg) {
    if (c == '\n')
      out += "; ";
    else if (static_cast<unsigned char>(c) < 0x20 && c != '\t')
      out += '?';
    else
      out += c;
  }
  return out;
}

void warn(const std::string& msg) { std::fprintf(stderr, "dltrace: warning: %s\n", oneLine(msg).c_str()); }

}  // namespace dlrr::tools
