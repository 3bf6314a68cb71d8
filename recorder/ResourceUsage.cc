#include "recorder/ResourceUsage.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

namespace dlrr {
namespace {

// Small files only (/proc, cgroup): at most `cap` bytes.
std::string readSmall(const std::string& path, size_t cap = 16384) {
  std::string out;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  while (out.size() < cap) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

uint64_t tvNs(const timeval& tv) {
  return static_cast<uint64_t>(tv.tv_sec) * 1000000000ull + static_cast<uint64_t>(tv.tv_usec) * 1000ull;
}

uint64_t parseUnsigned(std::string_view s) {
  uint64_t v = 0;
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  bool any = false;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
    any = true;
    if (v > (UINT64_MAX - 9) / 10) return UINT64_MAX;
    v = v * 10 + static_cast<uint64_t>(s[i] - '0');
  }
  return any ? v : 0;
}

bool isDir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The directory of our memory cgroup, or "" when there is none to read.
std::string memoryCgroupDir(bool& v2) {
  std::string path = memoryCgroupPath(readSmall("/proc/self/cgroup"), v2);
  std::string root = v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory";
  if (!isDir(root)) return "";
  // In a cgroup namespace the path may not exist as such under the mount: the mount's root
  // is then our own cgroup.
  if (!path.empty() && path != "/" && isDir(root + path)) return root + path;
  return root;
}

}  // namespace

uint64_t parseStatusKb(std::string_view text, std::string_view key) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 && line[key.size()] == ':')
      return parseUnsigned(line.substr(key.size() + 1)) * 1024;
    pos = eol + 1;
  }
  return 0;
}

std::string memoryCgroupPath(std::string_view text, bool& v2) {
  std::string unified;
  v2 = false;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    size_t c1 = line.find(':');
    if (c1 == std::string_view::npos) continue;
    size_t c2 = line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    std::string_view controllers = line.substr(c1 + 1, c2 - c1 - 1);
    std::string_view path = line.substr(c2 + 1);
    if (controllers.empty()) {
      unified = std::string(path);
      continue;
    }
    size_t start = 0;
    while (start <= controllers.size()) {
      size_t comma = controllers.find(',', start);
      if (comma == std::string_view::npos) comma = controllers.size();
      if (controllers.substr(start, comma - start) == "memory") return std::string(path);
      start = comma + 1;
    }
  }
  if (!unified.empty()) v2 = true;
  return unified;
}

uint64_t parseMemoryLimit(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text.empty() || text == "max") return 0;
  uint64_t v = parseUnsigned(text);
  return v >= (1ull << 62) ? 0 : v;  // v1 "unlimited" is a page-rounded LLONG_MAX
}

int64_t parseOomKill(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.rfind("oom_kill ", 0) == 0) return static_cast<int64_t>(parseUnsigned(line.substr(9)));
  }
  return -1;
}

ResourceSample sampleSelfQuick() noexcept {
  ResourceSample s;
  rusage ru{};
  if (::getrusage(RUSAGE_SELF, &ru) == 0) {
    s.maxRssBytes = static_cast<uint64_t>(ru.ru_maxrss) * 1024;
    s.cpuUserNs = tvNs(ru.ru_utime);
    s.cpuSystemNs = tvNs(ru.ru_stime);
  }
  return s;
}

void fillLimits(ResourceSample& s) noexcept {
  try {
    rlimit rl{};
    if (::getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) s.addressSpaceLimit = rl.rlim_cur;
    bool v2 = false;
    std::string dir = memoryCgroupDir(v2);
    if (!dir.empty())
      s.memoryLimit = parseMemoryLimit(readSmall(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes")));
    s.memTotal = parseStatusKb(readSmall("/proc/meminfo"), "MemTotal");
  } catch (...) {  // best effort: limits unknown: reported as 0 (unknown)
  }
}

ResourceSample sampleSelfFull() noexcept {
  ResourceSample s = sampleSelfQuick();
  try {
    std::string status = readSmall("/proc/self/status");
    s.vmPeakBytes = parseStatusKb(status, "VmPeak");
    uint64_t hwm = parseStatusKb(status, "VmHWM");
    if (hwm > s.maxRssBytes) s.maxRssBytes = hwm;
  } catch (...) {  // best effort: usage unknown: reported as 0 (unknown)
  }
  fillLimits(s);
  return s;
}

int64_t cgroupOomKills() noexcept {
  try {
    bool v2 = false;
    std::string dir = memoryCgroupDir(v2);
    if (dir.empty()) return -1;
    return parseOomKill(readSmall(dir + (v2 ? "/memory.events" : "/memory.oom_control")));
  } catch (...) {
    return -1;
  }
}

}  // namespace dlrr
