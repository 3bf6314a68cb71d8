#include "tools/dlreplay/SourceCheck.h"

#include <sys/stat.h>

#include <map>

#include "format/TraceError.h"
#include "tools/common/Text.h"

namespace dlrr {
namespace {

bool isJobSource(const std::string& path) {
  if (path.size() < 4 || path.compare(path.size() - 3, 3, ".py") != 0) return false;
  for (const char* lib : {"/site-packages/", "/dist-packages/", "/lib/python3", "/lib/dlrr/python/"})
    if (path.find(lib) != std::string::npos) return false;
  return true;
}

}  // namespace

std::vector<std::string> changedSources(StreamReader& s) {
  struct Seen {
    uint64_t size;
    int64_t mtimeNs;
  };
  std::map<std::string, Seen> recorded;  // the last fact about each path wins
  try {
    s.forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
      if (!e.isFile()) return;
      auto f = e.getFile();
      if (f.getKind() != schema::FileFact::Kind::FILE) return;
      std::string path = f.getPath().cStr();
      if (isJobSource(path)) recorded[path] = {f.getSize(), f.getMtimeNs()};
    });
  } catch (const TraceError&) {  // best effort: damaged: what precedes the damage
  }
  std::vector<std::string> out;
  for (const auto& [path, was] : recorded) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) continue;  // missing: served from the trace, or the run says so
    const int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    if (static_cast<uint64_t>(st.st_size) == was.size && mtime == was.mtimeNs) continue;
    std::string what = static_cast<uint64_t>(st.st_size) != was.size
                           ? std::to_string(was.size) + " bytes then, " + std::to_string(st.st_size) + " now"
                           : "modified " + tools::formatTime(mtime) + ", recorded " + tools::formatTime(was.mtimeNs);
    out.push_back(tools::printable(path) + " changed since the recording (" + what +
                  "): the replay runs the code as it is now, and may diverge where it changed");
  }
  return out;
}

}  // namespace dlrr
