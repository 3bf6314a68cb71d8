#include "replayer/FileServer.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <stdexcept>

#include "format/Redact.h"
#include "format/Trace.h"
#include "format/UniqueFd.h"
#include "session/FilePaths.h"

namespace dlrr {
namespace {

struct Range {
  StreamReader* stream;
  uint64_t offset;
  Hash128 hash;
  uint64_t size;
};

struct Known {
  schema::FileFact::Kind kind = schema::FileFact::Kind::OTHER;
  uint64_t size = 0;
  uint32_t mode = 0;
  int64_t mtimeNs = 0;
  std::map<std::string, schema::FileFact::Kind> entries;
  std::vector<Range> ranges;
};

bool exists(const std::string& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

void mkdirs(const std::string& dir, const std::string& root) {
  if (dir.size() <= root.size()) return;
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) return;
  mkdirs(dir.substr(0, dir.rfind('/')), root);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error("cannot create " + dir + ": " + strerror(errno));
}

void placeholder(const std::string& p, bool dir) {
  if (exists(p)) return;
  if (dir) {
    ::mkdir(p.c_str(), 0700);
    return;
  }
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd >= 0) ::close(fd);
}

// Writes `bytes` at `offset`, leaving blocks of zeros as holes (the file was sized with
// ftruncate first, so they read as zeros). Returns the bytes actually written.
uint64_t writeSparse(int fd, const std::vector<uint8_t>& bytes, uint64_t offset, const std::string& target) {
  constexpr size_t kBlock = 4096;
  uint64_t written = 0;
  for (size_t at = 0; at < bytes.size();) {
    size_t n = std::min(kBlock - static_cast<size_t>((offset + at) % kBlock), bytes.size() - at);
    bool zero = std::all_of(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                            bytes.begin() + static_cast<std::ptrdiff_t>(at + n), [](uint8_t b) { return b == 0; });
    for (size_t off = 0; !zero && off < n;) {
      ssize_t w = ::pwrite(fd, bytes.data() + at + off, n - off, static_cast<off_t>(offset + at + off));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) throw std::runtime_error("cannot write " + target + ": " + strerror(errno));
      off += static_cast<size_t>(w);
    }
    if (!zero) written += n;
    at += n;
  }
  return written;
}

bool endsWith(const std::string& s, const char* suffix) {
  size_t n = strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

}  // namespace

bool isCodePath(const std::string& path, const std::vector<std::string>& codeDirs) {
  for (const auto& d : codeDirs)
    if (!d.empty() && d[0] == '/' && pathUnder(path, lexicallyNormal(d))) return true;
  std::string name = path.substr(path.rfind('/') + 1);
  for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* ext :
       {".py", ".pyc", ".pyo", ".pyw", ".pyd", ".pth", ".so", ".zip", ".egg", ".whl", ".pyz", ".dylib", ".a", ".o"})
    if (endsWith(name, ext)) return true;
  return name.find(".so.") != std::string::npos;  // libfoo.so.1
}

void makeScratch(const std::string& scratch) {
  if (::mkdir(scratch.c_str(), 0700) != 0) {
    if (errno != EEXIST) throw std::runtime_error("cannot create " + scratch + ": " + strerror(errno));
    struct stat st {};
    if (::lstat(scratch.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid())
      throw std::runtime_error(scratch + " is not a directory of yours");
    for (const char* sub : {"/served", "/written", "/deleted", "/files.log"})
      if (exists(scratch + sub))
        throw std::runtime_error(scratch + " holds an earlier replay's files; give an empty one");
  }
  for (const char* sub : {"/served", "/written", "/deleted"})
    if (::mkdir((scratch + sub).c_str(), 0700) != 0 && errno != EEXIST)
      throw std::runtime_error("cannot create " + scratch + sub + ": " + strerror(errno));
}

ServedTree buildServedTree(Trace& trace, const std::string& scratch, ServeFiles serve, const ServePolicy& policy) {
  std::map<std::string, Known> known;
  std::set<std::string> missed;  // paths a recorded process looked up and did not find
  for (auto& s : trace.streams()) {
    if (s->header().getRole() != schema::StreamHeader::Role::PROCESS) continue;
    StreamReader* reader = s.get();
    reader->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
      if (e.isMissingPaths()) {
        for (auto m : e.getMissingPaths().getPaths())
          if (m.getError() == ENOENT || m.getError() == ENOTDIR) missed.insert(m.getPath().cStr());
        return;
      }
      if (!e.isFile()) return;
      auto f = e.getFile();
      std::string path = f.getPath().cStr();
      if (path.empty() || path[0] != '/' || lexicallyNormal(path) != path) return;  // never outside the tree
      Known& k = known[path];
      k.kind = f.getKind();
      k.size = f.getSize();
      k.mode = f.getMode();
      k.mtimeNs = f.getMtimeNs();
      if (f.getHasEntries())
        for (auto d : f.getEntries()) {
          std::string name = d.getName().cStr();
          if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) continue;
          k.entries[name] = d.getKind();
        }
      auto ref = f.getData();
      if (ref.getSize() > 0)
        k.ranges.push_back({reader, f.getOffset(), Hash128{ref.getHashLo(), ref.getHashHi()}, ref.getSize()});
    });
  }
  ServedTree tree;
  tree.paths = known.size();
  for (auto& [path, k] : known) {
    uint64_t b = 0;
    for (auto& r : k.ranges) b += r.size;
    tree.recordedBytes[path] = b;
  }
  if (serve == ServeFiles::Never) return tree;
  const std::string root = scratch + "/served";
  for (auto& [path, k] : known) {
    // --serve-files always shadows files whose bytes the trace holds; a directory, or a file
    // known only by its stat, is served only where it is missing (never a script or a data
    // directory of yours replaced by an empty stand-in). Code that exists here is never
    // shadowed, --serve-code or not: the job's sources as they are now run (an edited
    // helper module silently replaced by the recorded one would not be the code replayed).
    bool shadow = serve == ServeFiles::Always && k.kind == schema::FileFact::Kind::FILE && !k.ranges.empty() &&
                  !isCodePath(path, policy.codeDirs);
    if (path == "/" || (!shadow && exists(path))) continue;
    // A file the recorded job missed, then made, and never read back (inductor's compiled .so,
    // loaded by the dynamic loader, whose reads are not ours): a stand-in of zeros would make the
    // replayed job skip making it and then load zeros. The replayed job makes it again instead.
    if (k.kind == schema::FileFact::Kind::FILE && k.ranges.empty() && missed.count(path)) continue;
    // A credential file: the recording kept its stat only; the job gets ENOENT, not zeros.
    if (k.kind != schema::FileFact::Kind::DIRECTORY && isCredentialPath(path)) {
      tree.secretSkipped.push_back(path);
      continue;
    }
    // A trace is data: nothing it holds is put where Python or the loader would run it.
    if (k.kind != schema::FileFact::Kind::DIRECTORY && !policy.serveCode && isCodePath(path, policy.codeDirs)) {
      tree.codeSkipped.push_back(path);
      continue;
    }
    std::string target = root + path;
    mkdirs(target.substr(0, target.rfind('/')), root);
    if (k.kind == schema::FileFact::Kind::DIRECTORY) {
      placeholder(target, true);
    } else if (k.kind == schema::FileFact::Kind::FILE) {
      UniqueFd fd(::open(target.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
      if (fd.get() < 0) throw std::runtime_error("cannot create " + target + ": " + strerror(errno));
      if (::ftruncate(fd.get(), static_cast<off_t>(k.size)) != 0)  // a hole where nothing was recorded
        throw std::runtime_error("cannot size " + target + ": " + strerror(errno));
      for (auto& r : k.ranges) {
        if (r.offset > k.size || r.size > k.size - r.offset) continue;  // the file shrank after
        std::vector<uint8_t> bytes = r.stream->readBlob(r.hash, r.size);
        if (bytes.size() > k.size - r.offset) continue;
        uint64_t data = static_cast<uint64_t>(std::count_if(bytes.begin(), bytes.end(), [](uint8_t b) { return b; }));
        if (tree.bytes + data > policy.budget)  // counted before writing: a bound, not a report
          throw ServeBudgetExceeded("serving the trace's files would write more than " + std::to_string(policy.budget) +
                                    " bytes (at " + path + ")");
        tree.bytes += writeSparse(fd.get(), bytes, r.offset, target);
      }
      ::fchmod(fd.get(), (k.mode & 07777) | 0600);
      timespec times[2] = {{0, UTIME_OMIT}, {k.mtimeNs / 1000000000LL, k.mtimeNs % 1000000000LL}};
      ::futimens(fd.get(), times);
    } else {
      continue;  // symlinks and devices: their targets are recorded under their own names
    }
    ++tree.built;
    for (auto& [name, kind] : k.entries) {
      std::string child = path + "/" + name;
      if (known.count(child) || exists(child) || missed.count(child)) continue;  // made by the job: as above
      if (kind != schema::FileFact::Kind::DIRECTORY && !policy.serveCode && isCodePath(child, policy.codeDirs))
        continue;  // not even an empty stand-in where an import would look
      placeholder(target + "/" + name, kind == schema::FileFact::Kind::DIRECTORY);  // listed, never read: empty
    }
  }
  // Directories' mtimes last: creating their entries moved them.
  for (auto& [path, k] : known)
    if (k.kind == schema::FileFact::Kind::DIRECTORY && path != "/" && exists(root + path)) {
      timespec times[2] = {{0, UTIME_OMIT}, {k.mtimeNs / 1000000000LL, k.mtimeNs % 1000000000LL}};
      ::utimensat(AT_FDCWD, (root + path).c_str(), times, AT_SYMLINK_NOFOLLOW);
    }
  return tree;
}

FilesReport readFilesReport(const std::string& scratch, const ServedTree& tree) {
  FilesReport r;
  std::ifstream in(scratch + "/files.log");
  std::set<std::string> seen;
  std::string line;
  while (std::getline(in, line)) {
    if (!seen.insert(line).second) continue;  // several processes log the same path
    size_t tab = line.find('\t');
    if (tab == std::string::npos) continue;
    std::string what = line.substr(0, tab), rest = line.substr(tab + 1);
    if (what == "served") {
      r.served.push_back(rest);
      auto it = tree.recordedBytes.find(rest);
      if (it != tree.recordedBytes.end()) r.servedBytes += it->second;
    } else if (what == "written") {
      if (exists(scratch + "/written" + rest)) r.written.push_back(rest);  // else removed or renamed since
    } else if (what == "deleted") {
      r.deleted.push_back(rest);
    } else if (what == "mkdir") {
      if (exists(scratch + "/written" + rest)) r.dirs.push_back(rest);
    } else if (what == "renamed") {
      size_t t2 = rest.find('\t');
      r.renamed.push_back(t2 == std::string::npos ? rest : rest.substr(0, t2) + " -> " + rest.substr(t2 + 1));
    }
  }
  return r;
}

std::string summarizePaths(const std::vector<std::string>& paths, size_t shown) {
  std::string out;
  for (size_t i = 0; i < paths.size() && i < shown; ++i) out += (i ? ", " : "") + paths[i];
  if (paths.size() > shown) out += ", ... (" + std::to_string(paths.size() - shown) + " more)";
  return out;
}

}  // namespace dlrr
