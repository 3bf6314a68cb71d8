#include "format/TraceDir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "format/TraceError.h"

namespace dlrr {
namespace {

[[noreturn]] void throwErrno(const std::string& what, int err) {
  throw TraceError(ErrorKind::Io, what + ": " + std::strerror(err));
}

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

UniqueFd createTraceDir(const std::string& path) {
  if (path.empty()) throw TraceError(ErrorKind::Usage, "empty trace path");
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) throwErrno("cannot create trace directory " + path, errno);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOTDIR || errno == ELOOP) throw TraceError(ErrorKind::Usage, path + " exists and is not a directory");
    throwErrno("cannot open trace directory " + path, errno);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throwErrno("cannot stat " + path, errno);
  if (st.st_uid != ::geteuid()) throw TraceError(ErrorKind::Usage, path + " belongs to another user");
  // Private regardless of umask (and of what an earlier mkdir left).
  if ((st.st_mode & 07777) != 0700 && ::fchmod(fd.get(), 0700) != 0) throwErrno("cannot chmod " + path, errno);
  return fd;
}

UniqueFd openTraceDir(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) {
    int err = errno;
    if (err == ENOTDIR) {
      if (endsWith(path, kStreamExt))
        throw TraceError(ErrorKind::NotATrace,
                         path + " is a stream file inside a trace; pass the trace directory that holds it");
      throw TraceError(ErrorKind::NotATrace,
                       path + " is a file, not a dlrr trace (a trace is a directory made by dlrecord)");
    }
    throwErrno("cannot open trace " + path, err);
  }
  return fd;
}

UniqueFd createStreamFile(int dirFd, const std::string& base, std::string& nameOut) {
  for (int n = 0; n < 1000; ++n) {
    std::string name = n == 0 ? base : base + "." + std::to_string(n);
    std::string file = name + kStreamExt;
    int fd = ::openat(dirFd, file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) {
      ::fchmod(fd, 0600);  // umask may have narrowed it; never widen beyond 0600
      nameOut = name;
      return UniqueFd(fd);
    }
    if (errno != EEXIST) throwErrno("cannot create stream file " + file, errno);
  }
  throw TraceError(ErrorKind::Io, "too many stream files named " + base);
}

std::vector<std::string> listStreams(int dirFd) {
  int dup = ::fcntl(dirFd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) throwErrno("cannot read trace directory", errno);
  DIR* d = ::fdopendir(dup);
  if (!d) {
    ::close(dup);
    throwErrno("cannot read trace directory", errno);
  }
  ::rewinddir(d);
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (endsWith(n, kStreamExt)) names.push_back(n.substr(0, n.size() - std::strlen(kStreamExt)));
  }
  ::closedir(d);
  std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
    bool la = a == kLauncherStream, lb = b == kLauncherStream;
    if (la != lb) return la;
    return a < b;
  });
  return names;
}

namespace {

// Calls fn(name) for each entry of the directory; false when it cannot be read.
template <typename Fn>
bool forEachEntry(int dirFd, Fn&& fn) {
  int dup = ::fcntl(dirFd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) return false;
  DIR* d = ::fdopendir(dup);
  if (!d) {
    ::close(dup);
    return false;
  }
  ::rewinddir(d);
  while (dirent* e = ::readdir(d)) fn(std::string(e->d_name));
  ::closedir(d);
  return true;
}

// N of `<stream>.bulk<N>.dlb`, or -1 when `file` is not one of stream's bulk files.
int64_t bulkNumber(const std::string& file, const std::string& stream) {
  std::string prefix = stream + ".bulk";
  if (file.size() <= prefix.size() + std::strlen(kBulkExt) || file.compare(0, prefix.size(), prefix) != 0 ||
      !endsWith(file, kBulkExt))
    return -1;
  std::string digits = file.substr(prefix.size(), file.size() - prefix.size() - std::strlen(kBulkExt));
  if (digits.empty() || digits.size() > 15) return -1;
  int64_t n = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
    n = n * 10 + (c - '0');
  }
  return n;
}

}  // namespace

UniqueFd createBulkFile(int dirFd, const std::string& stream, uint64_t first, std::string& nameOut) {
  for (uint64_t n = first; n < first + 1000; ++n) {
    std::string file = stream + ".bulk" + std::to_string(n) + kBulkExt;
    int fd = ::openat(dirFd, file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) {
      ::fchmod(fd, 0600);
      nameOut = file;
      return UniqueFd(fd);
    }
    if (errno != EEXIST) throwErrno("cannot create bulk file " + file, errno);
  }
  throw TraceError(ErrorKind::Io, "too many bulk files of " + stream);
}

void setStreamFormatMajor(int dirFd, const std::string& file, uint16_t major) {
  // Not through the writer's O_APPEND fd (pwrite would append there): a second open. Two bytes
  // at offset 8 of the header, which holds no checksum; the page is written back with the
  // stream's next commit (fdatasync writes back every dirty page of the file).
  UniqueFd fd(::openat(dirFd, file.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) throwErrno("cannot open " + file, errno);
  uint8_t v[2] = {static_cast<uint8_t>(major), static_cast<uint8_t>(major >> 8)};
  if (::pwrite(fd.get(), v, sizeof v, 8) != static_cast<ssize_t>(sizeof v)) throwErrno("cannot write " + file, errno);
}

std::vector<std::string> listBulkFiles(int dirFd, const std::string& stream) {
  std::vector<std::pair<int64_t, std::string>> found;
  forEachEntry(dirFd, [&](const std::string& n) {
    int64_t k = bulkNumber(n, stream);
    if (k >= 0) found.emplace_back(k, n);
  });
  std::sort(found.begin(), found.end());
  std::vector<std::string> names;
  names.reserve(found.size());
  for (auto& f : found) names.push_back(std::move(f.second));
  return names;
}

uint64_t traceBytes(int dirFd) {
  uint64_t total = 0;
  forEachEntry(dirFd, [&](const std::string& n) {
    struct stat st {};
    if (n == "." || n == "..") return;
    if (::fstatat(dirFd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
      total += static_cast<uint64_t>(st.st_size);
  });
  return total;
}

}  // namespace dlrr
