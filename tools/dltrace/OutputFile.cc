#include "tools/dltrace/OutputFile.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "format/TraceError.h"
#include "format/UniqueFd.h"

namespace dlrr::tools {

void writeOutputFile(const std::string& file, const std::string& content) {
  UniqueFd fd(file == "-" ? ::dup(STDOUT_FILENO)
                          : ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) throw TraceError(ErrorKind::Io, "cannot create " + file + ": " + std::strerror(errno));
  const char* p = content.data();
  size_t n = content.size();
  while (n > 0) {
    ssize_t w = ::write(fd.get(), p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw TraceError(ErrorKind::Io, "cannot write " + file + ": " + std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  if (::close(fd.release()) != 0 && errno != EINTR)
    throw TraceError(ErrorKind::Io, "cannot write " + file + ": " + std::strerror(errno));
}

}  // namespace dlrr::tools
