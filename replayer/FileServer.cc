#include "replayer/FileServer.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <stdexcept>

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

}  // namespace

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

ServedTree buildServedTree(Trace& trace, const std::string& scratch, ServeFiles serve) {
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
    // directory of yours replaced by an empty stand-in).
    bool shadow = serve == ServeFiles::Always && k.kind == schema::FileFact::Kind::FILE && !k.ranges.empty();
    if (path == "/" || (!shadow && exists(path))) continue;
    // A file the recorded job missed, then made, and never read back (inductor's compiled .so,
    // loaded by the dynamic loader, whose reads are not ours): a stand-in of zeros would make the
    // replayed job skip making it and then load zeros. The replayed job makes it again instead.
    if (k.kind == schema::FileFact::Kind::FILE && k.ranges.empty() && missed.count(path)) continue;
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
        std::vector<uint8_t> bytes = r.stream->readBlob(r.hash, r.size);
        if (r.offset > k.size || bytes.size() > k.size - r.offset) continue;  // the file shrank after
        for (size_t off = 0; off < bytes.size();) {
          ssize_t w = ::pwrite(fd.get(), bytes.data() + off, bytes.size() - off, static_cast<off_t>(r.offset + off));
          if (w < 0 && errno == EINTR) continue;
          if (w <= 0) throw std::runtime_error("cannot write " + target + ": " + strerror(errno));
          off += static_cast<size_t>(w);
        }
        tree.bytes += bytes.size();
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
      if (known.count(child) || exists(child) || missed.count(child)) continue;     // made by the job: as above
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
