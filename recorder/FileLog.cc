#include "recorder/FileLog.h"

#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <tuple>

#include "format/Redact.h"
#include "recorder/RecordSession.h"
#include "session/FilePaths.h"

namespace dlrr {
namespace {

thread_local int tPaused = 0;

schema::FileFact::Kind kindOf(mode_t m) noexcept {
  if (S_ISREG(m)) return schema::FileFact::Kind::FILE;
  if (S_ISDIR(m)) return schema::FileFact::Kind::DIRECTORY;
  if (S_ISLNK(m)) return schema::FileFact::Kind::SYMLINK;
  return schema::FileFact::Kind::OTHER;
}

schema::FileFact::Kind kindOfDirent(unsigned char t) noexcept {
  switch (t) {
    case DT_REG:
      return schema::FileFact::Kind::FILE;
    case DT_DIR:
      return schema::FileFact::Kind::DIRECTORY;
    case DT_LNK:
      return schema::FileFact::Kind::SYMLINK;
    default:
      return schema::FileFact::Kind::OTHER;
  }
}

int64_t mtimeOf(const struct stat& st) noexcept {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
}

}  // namespace

FileLog::FileLog(RecordSession& session, uint64_t wholeMax) : session_(session), wholeMax_(wholeMax) {
  excluded_.push_back(session.config().traceDir);
}

void FileLog::exclude(const std::string& dir) {
  if (dir.empty() || dir[0] != '/') return;
  std::lock_guard<std::mutex> lk(mu_);
  excluded_.push_back(lexicallyNormal(dir));
}

void FileLog::pauseThisThread(bool pause) noexcept { tPaused += pause ? 1 : (tPaused > 0 ? -1 : 0); }

bool FileLog::wanted() const noexcept {
  return enabled_.load(std::memory_order_relaxed) && tPaused == 0 && session_.active();
}

std::string FileLog::interesting(int dirfd, const char* path) {
  std::string abs = absolutePath(dirfd, path);
  if (abs.empty() || isSystemPath(abs)) return {};
  for (const auto& d : excluded_)
    if (pathUnder(abs, d)) return {};
  return abs;
}

void FileLog::writeFact(const std::string& abs, const struct stat& st,
                        const std::vector<std::pair<std::string, int>>* entries, uint64_t offset, const void* data,
                        uint64_t n) {
  if (isCredentialPath(abs)) data = nullptr, n = 0, entries = nullptr;  // secrets: the stat alone
  session_.appendEvent(session_.currentStep(), [&](schema::Event::Builder e, StreamWriter& w) {
    auto f = e.initFile();
    f.setPath(abs);
    f.setKind(kindOf(st.st_mode));
    f.setSize(static_cast<uint64_t>(st.st_size));
    f.setMode(st.st_mode);
    f.setMtimeNs(mtimeOf(st));
    if (entries) {
      f.setHasEntries(true);
      auto list = f.initEntries(static_cast<unsigned>(entries->size()));
      for (unsigned i = 0; i < entries->size(); ++i) {
        list[i].setName((*entries)[i].first);
        list[i].setKind(kindOfDirent(static_cast<unsigned char>((*entries)[i].second)));
      }
    }
    if (data && n) {
      BlobId id = w.putBlob(data, n);
      f.setOffset(offset);
      auto ref = f.initData();
      ref.setHashLo(id.hash.lo);
      ref.setHashHi(id.hash.hi);
      ref.setSize(id.size);
    }
  });
}

void FileLog::statted(int dirfd, const char* path, const struct stat& st) noexcept {
  try {
    std::lock_guard<std::mutex> lk(mu_);
    std::string abs = interesting(dirfd, path);
    if (abs.empty()) return;
    auto [it, fresh] = seen_.try_emplace(abs);
    Seen& s = it->second;
    uint64_t size = static_cast<uint64_t>(st.st_size);
    if (!fresh && s.size == size && s.mtimeNs == mtimeOf(st) && s.mode == st.st_mode) return;
    s = Seen{size, mtimeOf(st), st.st_mode, false, false};
    writeFact(abs, st, nullptr, 0, nullptr, 0);
  } catch (...) {  // best effort: a fact lost (out of memory): a data-less replay that needs it fails at that read
  }
}

void FileLog::opened(int dirfd, const char* path, int fd) noexcept {
  try {
    std::lock_guard<std::mutex> lk(mu_);
    std::string abs = interesting(dirfd, path);
    if (abs.empty()) return;
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return;
    auto [it, fresh] = seen_.try_emplace(abs);
    Seen& s = it->second;
    uint64_t size = static_cast<uint64_t>(st.st_size);
    bool same = !fresh && s.size == size && s.mtimeNs == mtimeOf(st) && s.mode == st.st_mode;
    if (same && (s.whole || size > wholeMax_)) return;
    s = Seen{size, mtimeOf(st), st.st_mode, false, false};
    if (size > wholeMax_) {  // a stat only; the ranges it uses come from range() and readFrom()
      large_[{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)}] = abs;
      largeOpened_.store(true, std::memory_order_relaxed);
      writeFact(abs, st, nullptr, 0, nullptr, 0);
      return;
    }
    std::vector<uint8_t> bytes(size);
    uint64_t got = 0;
    while (got < size) {
      ssize_t r = ::pread(fd, bytes.data() + got, size - got, static_cast<off_t>(got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += static_cast<uint64_t>(r);
    }
    if (got != size) {  // changed under us or unreadable: a stat only
      writeFact(abs, st, nullptr, 0, nullptr, 0);
      return;
    }
    s.whole = true;
    writeFact(abs, st, nullptr, 0, bytes.data(), size);
  } catch (...) {  // best effort: a fact lost (out of memory): a data-less replay that needs it fails at that read
  }
}

void FileLog::listed(int dirfd, const char* path) noexcept {
  try {
    std::lock_guard<std::mutex> lk(mu_);
    std::string abs = interesting(dirfd, path);
    if (abs.empty()) return;
    struct stat st {};
    if (::stat(abs.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return;
    auto [it, fresh] = seen_.try_emplace(abs);
    Seen& s = it->second;
    if (!fresh && s.listed && s.mtimeNs == mtimeOf(st)) return;  // a new entry changes the mtime
    std::vector<std::pair<std::string, int>> entries;
    if (DIR* d = ::opendir(abs.c_str())) {
      while (dirent* de = ::readdir(d)) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        unsigned char type = de->d_type;
        struct stat est {};
        if (type == DT_UNKNOWN && ::fstatat(::dirfd(d), de->d_name, &est, AT_SYMLINK_NOFOLLOW) == 0)
          type = S_ISDIR(est.st_mode)   ? DT_DIR
                 : S_ISREG(est.st_mode) ? DT_REG
                 : S_ISLNK(est.st_mode) ? DT_LNK
                                        : DT_UNKNOWN;
        entries.emplace_back(de->d_name, type);  // some file systems leave the type to a stat
      }
      ::closedir(d);
    } else {
      return;
    }
    s = Seen{static_cast<uint64_t>(st.st_size), mtimeOf(st), st.st_mode, false, true};
    writeFact(abs, st, &entries, 0, nullptr, 0);
  } catch (...) {  // best effort: a fact lost (out of memory): a data-less replay that needs it fails at that read
  }
}

void FileLog::readFrom(int fd, const void* data, uint64_t n, int64_t end) noexcept {
  if (!data || !n || end < static_cast<int64_t>(n)) return;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return;
  std::string path;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = large_.find({static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)});
    if (it == large_.end()) return;
    path = it->second;
  }
  range(path.c_str(), static_cast<uint64_t>(end) - n, data, n);
}

void FileLog::range(const char* path, uint64_t offset, const void* data, uint64_t n) noexcept {
  if (!data || !n || !session_.active()) return;
  try {
    std::lock_guard<std::mutex> lk(mu_);
    std::string abs = interesting(AT_FDCWD, path);
    if (abs.empty()) return;
    auto it = seen_.find(abs);
    if (it != seen_.end() && it->second.whole) return;    // recorded whole already
    if (!ranges_.emplace(abs, offset, n).second) return;  // this very range: recorded
    struct stat st {};
    if (::stat(abs.c_str(), &st) != 0) return;
    writeFact(abs, st, nullptr, offset, data, n);
  } catch (...) {  // best effort: a fact lost (out of memory): a data-less replay that needs it fails at that read
  }
}

}  // namespace dlrr
