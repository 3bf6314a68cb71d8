#include "session/FilePaths.h"

#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <vector>

namespace dlrr {

std::string lexicallyNormal(std::string_view abs) {
  std::vector<std::string_view> parts;
  size_t i = 0;
  while (i < abs.size()) {
    size_t j = abs.find('/', i);
    if (j == std::string_view::npos) j = abs.size();
    std::string_view part = abs.substr(i, j - i);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    i = j + 1;
  }
  std::string out;
  for (auto p : parts) {
    out += '/';
    out += p;
  }
  return out.empty() ? std::string("/") : out;
}

std::string absolutePath(int dirfd, const char* path) {
  if (!path || !*path) return {};
  if (path[0] == '/') return lexicallyNormal(path);
  char buf[PATH_MAX];
  std::string base;
  if (dirfd == AT_FDCWD) {
    if (!::getcwd(buf, sizeof buf)) return {};
    base = buf;
  } else {
    char link[40];
    snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
    ssize_t n = ::readlink(link, buf, sizeof buf - 1);
    if (n <= 0 || buf[0] != '/') return {};
    base.assign(buf, static_cast<size_t>(n));
  }
  base += '/';
  base += path;
  return lexicallyNormal(base);
}

bool pathUnder(std::string_view path, std::string_view dir) noexcept {
  if (dir.empty()) return false;
  if (dir.size() > 1 && dir.back() == '/') dir.remove_suffix(1);
  if (dir == "/") return !path.empty() && path[0] == '/';
  return path.size() >= dir.size() && path.compare(0, dir.size(), dir) == 0 &&
         (path.size() == dir.size() || path[dir.size()] == '/');
}

bool isSystemPath(std::string_view abs) noexcept {
  static constexpr std::string_view kDirs[] = {
      "/proc",      "/sys",         "/dev",           "/run",         "/etc",     "/usr/lib",  "/usr/lib64",
      "/usr/lib32", "/usr/libexec", "/usr/local/lib", "/usr/include", "/usr/bin", "/usr/sbin", "/usr/share/zoneinfo",
      "/lib",       "/lib64",       "/lib32",         "/bin",         "/sbin"};
  for (auto d : kDirs)
    if (pathUnder(abs, d)) return true;
  static constexpr std::string_view kParts[] = {"/site-packages/", "/dist-packages/", "/__pycache__/", "/lib/python3"};
  for (auto p : kParts)
    if (abs.find(p) != std::string_view::npos) return true;
  return abs.size() >= 4 && (abs.substr(abs.size() - 4) == ".pyc");
}

}  // namespace dlrr
