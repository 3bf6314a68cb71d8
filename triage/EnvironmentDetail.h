#pragma once
// Internal to triage/Environment*.cc and HostProbe.cc: small file-system and naming helpers
// shared by the recorded environment, the host probe and the diff.
#include <capnp/blob.h>
#include <capnp/common.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "triage/Environment.h"

namespace dlrr::triage::detail {

inline std::string str(capnp::Text::Reader t) { return std::string(t.begin(), t.size()); }

inline bool exists(const std::string& p) {
  struct stat st {};
  return !p.empty() && ::stat(p.c_str(), &st) == 0;
}

// Whether `p` came into being between `fromRealNs` and `toRealNs` (CLOCK_REALTIME): its birth
// time where the file system keeps one, else its inode change time (never earlier than its
// birth). A path the recorded job missed and then created itself (a cache it filled) is no
// difference from this machine. File times come from a coarse clock (a tick behind at most)
// and `toRealNs` is taken after the job ended, so the window is only a little wider than the
// recording: a file someone made a moment after it is still a difference.
inline bool bornDuring(const std::string& p, int64_t fromRealNs, int64_t toRealNs) {
  if (fromRealNs <= 0 || toRealNs < fromRealNs) return false;
  struct statx sx {};
  if (::statx(AT_FDCWD, p.c_str(), AT_SYMLINK_NOFOLLOW, STATX_BTIME | STATX_CTIME, &sx) != 0) return false;
  const struct statx_timestamp& t = (sx.stx_mask & STATX_BTIME) ? sx.stx_btime : sx.stx_ctime;
  if (t.tv_sec < 0 || t.tv_sec > 4'000'000'000LL) return false;  // before 1970 or after 2096: not this recording
  const int64_t born = t.tv_sec * 1000000000LL + t.tv_nsec;
  // Compared as differences: the recorded bounds come from a trace and may be near the limits.
  return born >= fromRealNs - 100'000'000 && (born <= toRealNs || born - toRealNs <= 20'000'000);
}

inline bool isDir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

inline std::string readFile(const std::string& path, size_t cap = 1 << 20) {
  std::ifstream in(path, std::ios::binary);
  std::string out;
  if (!in) return out;
  out.resize(cap);
  in.read(out.data(), static_cast<std::streamsize>(cap));
  out.resize(static_cast<size_t>(in.gcount()));
  return out;
}

inline std::string dirName(const std::string& p) {
  auto s = p.rfind('/');
  return s == std::string::npos ? "." : s == 0 ? "/" : p.substr(0, s);
}

inline std::string baseName(const std::string& p) {
  auto s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

// "python3" on PATH -> "/usr/bin/python3"; paths are returned as they are.
inline std::string onPath(const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t colon = p.find(':', start);
    if (colon == std::string::npos) colon = p.size();
    std::string dir = p.substr(start, colon - start);
    std::string cand = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(cand.c_str(), X_OK) == 0) return cand;
    start = colon + 1;
  }
  return "";
}

inline std::string realPath(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : p;
}

// "python3.11" -> "3.11"; "" when the name says nothing.
inline std::string versionFromName(const std::string& exe) {
  std::string b = baseName(exe);
  if (b.rfind("python", 0) != 0) return "";
  std::string v = b.substr(6);
  if (v.empty() || v.find('.') == std::string::npos) return "";
  for (char c : v)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.')) return "";
  return v;
}

// Lower-cased, '-' and '_' equal: distribution names vs module names.
inline std::string normName(const std::string& s) {
  std::string o;
  for (char c : s) o += c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

// Version of `module` installed in `siteDir`, from NAME-VERSION.dist-info / .egg-info there.
inline std::string distVersion(const std::string& siteDir, const std::string& module) {
  DIR* d = ::opendir(siteDir.c_str());
  if (!d) return "";
  std::string want = normName(module) + "_";  // name, then '-' (normalised to '_'), then version
  std::string found;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    std::string suffix;
    for (const char* s : {".dist-info", ".egg-info"})
      if (n.size() > std::strlen(s) && n.compare(n.size() - std::strlen(s), std::strlen(s), s) == 0) suffix = s;
    if (suffix.empty()) continue;
    std::string stem = n.substr(0, n.size() - suffix.size());
    auto dash = stem.find('-');
    if (dash == std::string::npos) continue;
    if (normName(stem.substr(0, dash)) + "_" != want) continue;
    std::string v = stem.substr(dash + 1);
    auto pyTag = v.find("-py");  // NAME-VERSION-py3.11.egg-info
    if (pyTag != std::string::npos) v = v.substr(0, pyTag);
    found = v;
    break;
  }
  ::closedir(d);
  return found;
}

inline std::string torchVersionFile(const std::string& pkgDir) {
  return versionAssigned(readFile(pkgDir + "/version.py", 1 << 16));
}

inline bool secretLooking(const std::string& k) {
  std::string u;
  for (char c : k) u += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const char* s : {"TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL", "AUTH", "COOKIE", "SESSION"})
    if (u.find(s) != std::string::npos) return true;
  return false;
}

}  // namespace dlrr::triage::detail
