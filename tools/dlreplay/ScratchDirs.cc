#include "tools/dlreplay/ScratchDirs.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <stdexcept>

namespace dlrr {
namespace {

constexpr const char* kMark = "/.dlreplay-scratch";
constexpr std::string_view kPrefix = "dlreplay-";
constexpr size_t kRandom = 6;  // mkdtemp's XXXXXX

bool ownedDir(const std::string& path, uid_t uid) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == uid;
}

// Bytes on disk under `dir` (no symlink followed).
uint64_t diskBytes(const std::string& dir) {
  uint64_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(
           dir, std::filesystem::directory_options::skip_permission_denied, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) == 0) n += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return n;
}

}  // namespace

std::string scratchParent() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp && *tmp == '/' ? tmp : "/tmp";
}

int claimScratch(const std::string& dir) {
  std::string mark = dir + kMark;
  int fd = ::open(mark.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error("cannot create " + mark + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_SH) != 0) {
    int e = errno;
    ::close(fd);
    throw std::runtime_error("cannot lock " + mark + ": " + std::strerror(e));
  }
  return fd;
}

void removeTree(const std::string& dir) {
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(
           dir, std::filesystem::directory_options::skip_permission_denied, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
    if (it->is_directory(ec) && !it->is_symlink(ec)) ::chmod(it->path().c_str(), 0700);
  std::filesystem::remove_all(dir, ec);
}

ScratchSweep sweepScratch(const std::string& parent, std::optional<int> olderThanDays) {
  ScratchSweep out;
  const uid_t uid = ::getuid();
  const time_t cutoff = olderThanDays ? std::time(nullptr) - time_t{*olderThanDays} * 86400 : 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(parent, ec)) {
    std::string name = e.path().filename().string();
    if (name.size() != kPrefix.size() + kRandom || name.compare(0, kPrefix.size(), kPrefix) != 0) continue;
    std::string dir = e.path().string();
    if (!ownedDir(dir, uid)) continue;
    // The mark, opened without following a link and held locked while the tree goes: a replay
    // that still runs holds it shared, so the exclusive lock is refused.
    int fd = ::open((dir + kMark).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;  // not dlreplay's (or made before marks: left alone)
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != uid || (olderThanDays && st.st_mtime > cutoff)) {
      ::close(fd);
      continue;
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      out.inUse.push_back(dir);
      ::close(fd);
      continue;
    }
    out.bytes += diskBytes(dir);
    removeTree(dir);
    out.removed.push_back(dir);
    ::close(fd);
  }
  return out;
}

}  // namespace dlrr
