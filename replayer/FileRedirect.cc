#include "replayer/FileRedirect.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "session/FilePaths.h"

namespace dlrr {
namespace {

constexpr const char* kMarker = "/.dlrr-deleted";

bool nonEmptyDir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return false;
  bool any = false;
  while (dirent* e = ::readdir(d))
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
      any = true;
      break;
    }
  ::closedir(d);
  return any;
}

mode_t statMode(const std::string& p, bool follow = true) {
  struct stat st {};
  int r = follow ? ::stat(p.c_str(), &st) : ::lstat(p.c_str(), &st);
  return r == 0 ? st.st_mode : 0;
}

bool copyFile(const std::string& from, const std::string& to) {
  int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return false;
  struct stat st {};
  ::fstat(in, &st);
  int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, (st.st_mode & 07777) | 0600);
  if (out < 0) {
    ::close(in);
    return false;
  }
  // In the kernel when it can (a reflink on file systems that share extents), else by hand.
  bool ok = true;
  for (;;) {
    ssize_t n = ::copy_file_range(in, nullptr, out, nullptr, 1 << 30, 0);
    if (n > 0) continue;
    if (n == 0) {
      ::close(in);
      ::close(out);
      return true;
    }
    if (errno == EINTR) continue;
    if (::lseek(in, 0, SEEK_CUR) != 0) {  // failed part-way: not a case for the fallback
      ::close(in);
      ::close(out);
      return false;
    }
    break;  // EXDEV, ENOSYS, EINVAL (not supported between these files): copy by hand
  }
  char buf[1 << 16];
  for (;;) {
    // Under the redirect lock on purpose: no thread may see the copy before it is whole.
    ssize_t n = ::read(in, buf, sizeof buf);  // NOLINT(clang-analyzer-unix.BlockInCriticalSection)
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = n == 0;
      break;
    }
    for (ssize_t off = 0; off < n;) {
      ssize_t w = ::write(out, buf + off, static_cast<size_t>(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        ok = false;
        break;
      }
      off += w;
    }
    if (!ok) break;
  }
  ::close(in);
  ::close(out);
  return ok;
}

std::string parentOf(const std::string& abs) {
  size_t slash = abs.rfind('/');
  return slash == 0 || slash == std::string::npos ? std::string("/") : abs.substr(0, slash);
}

// What the job could not change on this machine stays unchangeable in the replay (a job that
// failed to write into a read-only directory fails the same way): the user's file itself when
// it exists here, else its directory when that exists here. 0 or the errno.
int deniedHere(const std::string& abs, bool exists) {
  if (exists) return ::access(abs.c_str(), W_OK) == 0 || errno == ENOENT ? 0 : errno;
  std::string dir = parentOf(abs);
  return ::access(dir.c_str(), W_OK | X_OK) == 0 || errno == ENOENT || errno == ENOTDIR ? 0 : errno;
}

}  // namespace

FileRedirect::FileRedirect(const std::string& scratch, const std::string& traceDir, ServeFiles serve,
                           bool kernelIsolated)
    : scratch_(lexicallyNormal(scratch)),
      served_(scratch_ + "/served"),
      written_(scratch_ + "/written"),
      deleted_(scratch_ + "/deleted"),
      traceDir_(traceDir.empty() ? std::string() : lexicallyNormal(traceDir)),
      serve_(serve),
      kernelIsolated_(kernelIsolated) {
  if (const char* r = std::getenv("DLRR_REPORT")) report_ = r;
  if (const char* g = std::getenv("DLRR_GDB_STATUS")) gdbStatus_ = g;
  // An exec'd process of the job starts after others may have written: it must see that.
  changed_ = nonEmptyDir(written_) || nonEmptyDir(deleted_);
}

std::optional<FileRedirect::Settings> FileRedirect::fromEnvironment() {
  const char* mode = std::getenv("DLRR_MODE");
  const char* scratch = std::getenv("DLRR_SCRATCH");
  // dlpreflight records with a scratch directory too: the miniature job's writes land there,
  // not in its real output locations (nothing is served: the job's own files are there).
  const char* preflight = std::getenv("DLRR_PREFLIGHT");
  bool recordingPreflight = mode && strcmp(mode, "record") == 0 && preflight && *preflight;
  if (!mode || (strcmp(mode, "replay") != 0 && !recordingPreflight) || !scratch || scratch[0] != '/')
    return std::nullopt;
  Settings s;
  s.scratch = scratch;
  const char* isolation = std::getenv("DLRR_ISOLATION");
  s.kernelIsolated = isolation && strcmp(isolation, "kernel") == 0;
  if (recordingPreflight) {
    s.serve = ServeFiles::Never;
    if (const char* trace = std::getenv("DLRR_TRACE")) s.traceDir = trace;
    return s;
  }
  const char* serve = std::getenv("DLRR_SERVE_FILES");
  if (serve && strcmp(serve, "never") == 0)
    s.serve = ServeFiles::Never;
  else if (serve && strcmp(serve, "always") == 0)
    s.serve = ServeFiles::Always;
  if (const char* trace = std::getenv("DLRR_TRACE")) s.traceDir = trace;
  return s;
}

namespace {
// The directory of the object this code is in (libdlrr.so: lib/dlrr, which holds the Python
// hook). Writes there are dlrr's own, not the job's: Python 3.13 writes the hook's .pyc files
// when a replay first imports one (replay.py is never imported while recording).
const std::string& ownDirectory() {
  static const std::string dir = [] {
    Dl_info info{};
    if (!dladdr(reinterpret_cast<void*>(&ownDirectory), &info) || !info.dli_fname || info.dli_fname[0] != '/')
      return std::string();
    std::string f = info.dli_fname;
    return f.substr(0, f.rfind('/'));
  }();
  return dir;
}
}  // namespace

std::string FileRedirect::resolve(int dirfd, const char* path) const {
  std::string abs = absolutePath(dirfd, path);
  if (abs.empty()) return {};
  for (std::string_view d : {"/proc", "/sys", "/dev", "/run"})
    if (pathUnder(abs, d)) return {};
  if (const std::string& own = ownDirectory(); !own.empty() && pathUnder(abs, own)) return {};
  if (pathUnder(abs, scratch_) || pathUnder(abs, traceDir_)) return {};
  if ((!report_.empty() && abs.compare(0, report_.size(), report_) == 0) || (!gdbStatus_.empty() && abs == gdbStatus_))
    return {};
  return abs;
}

bool FileRedirect::isDeleted(const std::string& abs) const { return statMode(deleted_ + abs + kMarker, false) != 0; }

mode_t FileRedirect::lookup(const std::string& abs) const {
  if (changed_) {
    if (isDeleted(abs)) return 0;
    if (mode_t m = statMode(written(abs))) return m;
  }
  if (mode_t m = statMode(abs)) return m;
  return serve_ != ServeFiles::Never ? statMode(served(abs)) : 0;
}

bool FileRedirect::parentExists(const std::string& abs) const { return S_ISDIR(lookup(parentOf(abs))); }

bool FileRedirect::makeParents(const std::string& path, const std::string& root) const {
  std::string dir = parentOf(path);
  if (dir.size() <= root.size()) return true;
  if (S_ISDIR(statMode(dir))) return true;
  if (!makeParents(dir, root)) return false;
  return ::mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST;
}

void FileRedirect::whiteout(const std::string& abs) {
  std::string marker = deleted_ + abs + kMarker;
  if (!makeParents(marker, scratch_)) return;
  int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd >= 0) ::close(fd);
}

void FileRedirect::log(const char* what, const std::string& abs, const std::string& extra) {
  std::string line = std::string(what) + "\t" + abs + (extra.empty() ? "" : "\t" + extra) + "\n";
  if (!logged_.insert(line).second) return;
  int fd = ::open((scratch_ + "/files.log").c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return;
  ssize_t w = ::write(fd, line.data(), line.size());  // one write: lines of processes never interleave
  (void)w;
  ::close(fd);
}

std::string FileRedirect::forRead(const std::string& abs, std::string& fallback) {
  fallback.clear();
  std::lock_guard<std::mutex> lk(mu_);
  if (changed_) {
    if (isDeleted(abs)) return scratch_ + "/none" + abs;  // never exists: the lookup fails with ENOENT
    if (mode_t w = statMode(written(abs), false)) {
      if (!(S_ISDIR(w) && S_ISDIR(statMode(abs)))) return written(abs);
      // A directory the user has too: its listing stays the user's (docs/replay.md).
    }
  }
  if (serve_ == ServeFiles::Always && S_ISREG(statMode(served(abs), false))) {  // files only (FileServer.cc)
    log("served", abs);
    return served(abs);
  }
  if (serve_ != ServeFiles::Never) fallback = served(abs);
  return {};
}

void FileRedirect::servedUsed(const std::string& abs) {
  std::lock_guard<std::mutex> lk(mu_);
  log("served", abs);
}

std::string FileRedirect::forWrite(const std::string& abs, int flags, int& err) {
  std::lock_guard<std::mutex> lk(mu_);
  std::string w = written(abs);
  bool excl = (flags & O_CREAT) && (flags & O_EXCL);
  if (statMode(w, false)) {
    if (excl) {
      err = EEXIST;
      return {};
    }
    log("written", abs);
    return w;
  }
  bool gone = changed_ && isDeleted(abs);
  std::string src;
  mode_t m = 0;
  if (!gone) {
    m = statMode(abs);
    if (m) {
      src = abs;
    } else if (serve_ != ServeFiles::Never) {
      m = statMode(served(abs));
      if (m) src = served(abs);
    }
  }
  if (m && excl) {
    err = EEXIST;
    return {};
  }
  if (m && S_ISDIR(m)) {
    err = EISDIR;
    return {};
  }
  if (!m && !(flags & O_CREAT)) {
    err = ENOENT;
    return {};
  }
  if (int denied = deniedHere(abs, src == abs)) {
    err = denied;
    return {};
  }
  if (!m && !parentExists(abs)) {
    err = ENOENT;
    return {};
  }
  if (!makeParents(w, scratch_)) {
    err = errno;
    return {};
  }
  if (m && !(flags & O_TRUNC) && S_ISREG(m) && !copyFile(src, w)) {
    err = errno ? errno : EIO;
    return {};
  }
  if (m && (flags & O_TRUNC) && S_ISREG(m)) {
    // Truncated: nothing to copy, but the copy must exist (O_TRUNC without O_CREAT on an existing
    // file: filelock's lock files under /tmp/torchinductor_*), with the original's mode.
    int fd = ::open(w.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, m & 07777);
    if (fd < 0) {
      err = errno;
      return {};
    }
    ::close(fd);
  }
  if (gone) ::unlink((deleted_ + abs + kMarker).c_str());
  changed_ = true;
  log("written", abs);
  return w;
}

int FileRedirect::mkdir(const std::string& abs, mode_t mode) {
  std::lock_guard<std::mutex> lk(mu_);
  if (lookup(abs)) {
    errno = EEXIST;
    return -1;
  }
  if (!parentExists(abs)) {
    errno = ENOENT;
    return -1;
  }
  if (int denied = deniedHere(abs, false)) {
    errno = denied;
    return -1;
  }
  std::string w = written(abs);
  if (!makeParents(w, scratch_)) return -1;
  if (::mkdir(w.c_str(), mode | 0700) != 0 && errno != EEXIST) return -1;
  ::unlink((deleted_ + abs + kMarker).c_str());
  changed_ = true;
  log("mkdir", abs);
  return 0;
}

int FileRedirect::remove(const std::string& abs, bool dir) {
  std::lock_guard<std::mutex> lk(mu_);
  mode_t m = lookup(abs);
  if (!m) {
    errno = ENOENT;
    return -1;
  }
  if (dir && !S_ISDIR(m)) {
    errno = ENOTDIR;
    return -1;
  }
  if (!dir && S_ISDIR(m)) {
    errno = EISDIR;
    return -1;
  }
  std::string w = written(abs);
  if (!statMode(w, false))
    if (int denied = deniedHere(abs, false)) {  // removing needs the directory writable
      errno = denied;
      return -1;
    }
  if (statMode(w, false) && (dir ? ::rmdir(w.c_str()) : ::unlink(w.c_str())) != 0) return -1;
  changed_ = true;
  bool yours = statMode(abs, false) != 0;
  if (yours || (serve_ != ServeFiles::Never && statMode(served(abs), false))) whiteout(abs);
  if (yours) log("deleted", abs);  // one of yours, hidden from the replay (its own files just go)
  return 0;
}

int FileRedirect::rename(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> lk(mu_);
  mode_t m = lookup(from);
  if (!m) {
    errno = ENOENT;
    return -1;
  }
  if (!parentExists(to)) {
    errno = ENOENT;
    return -1;
  }
  std::string wf = written(from), wt = written(to);
  int denied = deniedHere(to, false);
  if (!denied && !statMode(wf, false)) denied = deniedHere(from, false);
  if (denied) {
    errno = denied;
    return -1;
  }
  if (!makeParents(wt, scratch_)) return -1;
  if (statMode(wf, false)) {
    if (::rename(wf.c_str(), wt.c_str()) != 0) return -1;
  } else if (S_ISREG(m)) {
    std::string src = statMode(from) ? from : served(from);
    if (!copyFile(src, wt)) return -1;
  } else {
    errno = EXDEV;  // a directory of the user's: callers such as shutil.move copy instead
    return -1;
  }
  if (statMode(from, false) || (serve_ != ServeFiles::Never && statMode(served(from), false))) whiteout(from);
  ::unlink((deleted_ + to + kMarker).c_str());
  changed_ = true;
  log("renamed", from, to);
  return 0;
}

}  // namespace dlrr

namespace dlrr {

int FileRedirect::link(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> lk(mu_);
  mode_t m = lookup(from);
  if (!m) {
    errno = ENOENT;
    return -1;
  }
  if (lookup(to)) {
    errno = EEXIST;
    return -1;
  }
  if (!parentExists(to)) {
    errno = ENOENT;
    return -1;
  }
  if (!S_ISREG(m)) {
    errno = EPERM;
    return -1;
  }
  if (int denied = deniedHere(to, false)) {
    errno = denied;
    return -1;
  }
  std::string wt = written(to);
  if (!makeParents(wt, scratch_)) return -1;
  std::string src = statMode(written(from), false) ? written(from) : statMode(from) ? from : served(from);
  if (!copyFile(src, wt)) return -1;  // a copy: the new name must not share the user's inode
  ::unlink((deleted_ + to + kMarker).c_str());
  changed_ = true;
  log("written", to);
  return 0;
}

int FileRedirect::symlink(const char* target, const std::string& abs) {
  std::lock_guard<std::mutex> lk(mu_);
  if (lookup(abs)) {
    errno = EEXIST;
    return -1;
  }
  if (!parentExists(abs)) {
    errno = ENOENT;
    return -1;
  }
  if (int denied = deniedHere(abs, false)) {
    errno = denied;
    return -1;
  }
  std::string w = written(abs);
  if (!makeParents(w, scratch_)) return -1;
  if (::symlink(target, w.c_str()) != 0) return -1;
  ::unlink((deleted_ + abs + kMarker).c_str());
  changed_ = true;
  log("written", abs);
  return 0;
}

std::string FileRedirect::socketPath(const std::string& abs, bool binding) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!changed_) return {};
  if (binding) {
    std::string dir = parentOf(abs);
    return S_ISDIR(statMode(written(dir))) && !statMode(dir) ? written(abs) : std::string();
  }
  return statMode(written(abs), false) ? written(abs) : std::string();
}

}  // namespace dlrr
