#include "tools/dlrecord/StatusPipe.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "recorder/HighFds.h"

namespace dlrr {

StatusPipe::StatusPipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return;
  read_.reset(fds[0]);
  // The job inherits the write end: above its descriptor limit, it takes none of the job's
  // numbers (recorder/HighFds.h; dlrecord's limit is the one the job starts with).
  write_.reset(moveAboveFdLimit(fds[1]));
}

std::string StatusPipe::environmentValue() const {
  struct stat st {};
  if (!write_.valid() || ::fstat(write_.get(), &st) != 0) return "";
  return std::to_string(write_.get()) + ":" + std::to_string(st.st_ino);
}

std::vector<std::string> StatusPipe::readLines() {
  std::string text;
  char buf[4096];
  for (;;) {
    ssize_t n = read_.valid() ? ::read(read_.get(), buf, sizeof buf) : 0;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    if (nl > start) lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return lines;
}

}  // namespace dlrr
