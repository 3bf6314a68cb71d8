#include "tools/dlreplay/ReplayFiles.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "format/Trace.h"
#include "format/TraceError.h"
#include "tools/common/Text.h"
#include "tools/dlreplay/ReplayOptions.h"

namespace dlrr {
namespace {

constexpr int kIo = 3;  // dlreplay's exit code for I/O errors (docs/cli.md)
constexpr size_t kShown = 5;

std::string freshScratch() {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp && *tmp == '/' ? tmp : "/tmp") + "/dlreplay-XXXXXX";
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("cannot create " + tmpl + ": " + std::strerror(errno));
  return tmpl;
}

}  // namespace

int ReplayFiles::prepare(Trace& trace, const ReplayOptions& o, std::map<std::string, std::string>& env) {
  ServeFiles serve = o.serveFiles == "always"  ? ServeFiles::Always
                     : o.serveFiles == "never" ? ServeFiles::Never
                                               : ServeFiles::Missing;
  try {
    if (o.scratch.empty()) {
      scratch_ = freshScratch();
      ownScratch_ = true;
    } else {
      std::error_code ec;
      scratch_ = std::filesystem::absolute(o.scratch, ec).lexically_normal().string();
      if (scratch_.size() > 1 && scratch_.back() == '/') scratch_.pop_back();
    }
    makeScratch(scratch_);
    tree_ = buildServedTree(trace, scratch_, serve);
  } catch (const TraceError& e) {
    std::fprintf(stderr, "dlreplay: cannot rebuild the recorded files: %s\n", e.what());
    return kIo;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dlreplay: scratch directory: %s\n", e.what());
    return kIo;
  }
  env["DLRR_SCRATCH"] = scratch_;
  env["DLRR_SERVE_FILES"] = o.serveFiles;
  ready_ = true;
  return 0;
}

ReplayFiles::~ReplayFiles() {
  if (!ready_) return;
  try {
    removeIfUnused(report());
  } catch (...) {
  }
}

FilesReport ReplayFiles::report() const { return readFilesReport(scratch_, tree_); }

void ReplayFiles::print(std::FILE* out) const {
  if (!ready_) return;
  FilesReport r = report();
  if (!r.served.empty())
    std::fprintf(out, "dlreplay: files: served %zu path(s) from the trace (%s recorded): %s\n", r.served.size(),
                 tools::humanBytes(r.servedBytes).c_str(), tools::printable(summarizePaths(r.served, kShown)).c_str());
  size_t changes = r.written.size() + r.deleted.size() + r.renamed.size() + r.dirs.size();
  if (changes) {
    std::fprintf(out, "dlreplay: files: the job's writes went to %s/written (your files were not modified)\n",
                 tools::printable(scratch_).c_str());
    if (!r.written.empty())
      std::fprintf(out, "dlreplay:   wrote %s\n", tools::printable(summarizePaths(r.written, kShown)).c_str());
    if (!r.dirs.empty())
      std::fprintf(out, "dlreplay:   made directories %s\n", tools::printable(summarizePaths(r.dirs, kShown)).c_str());
    if (!r.renamed.empty())
      std::fprintf(out, "dlreplay:   renamed %s\n", tools::printable(summarizePaths(r.renamed, kShown)).c_str());
    if (!r.deleted.empty())
      std::fprintf(out, "dlreplay:   removed (in the replay only) %s\n",
                   tools::printable(summarizePaths(r.deleted, kShown)).c_str());
  }
  removeIfUnused(r);
}

void ReplayFiles::removeIfUnused(const FilesReport& r) const {
  if (!ownScratch_ || !r.written.empty() || !r.deleted.empty() || !r.renamed.empty() || !r.dirs.empty()) return;
  std::error_code ec;  // the job wrote nothing: the served copies are in the trace, nothing to keep
  std::filesystem::remove_all(scratch_, ec);
}

void ReplayFiles::json(tools::JsonWriter& j) const {
  if (!ready_) return;
  FilesReport r = report();
  auto list = [&](const char* key, const std::vector<std::string>& v) {
    j.key(key).beginArray();
    for (const auto& p : v) j.value(p);
    j.endArray();
  };
  removeIfUnused(r);
  j.key("files").beginObject();
  j.field("scratch", std::filesystem::exists(scratch_) ? scratch_ : std::string());
  j.field("served_bytes", static_cast<long long>(r.servedBytes));
  list("served", r.served);
  list("written", r.written);
  list("dirs", r.dirs);
  list("renamed", r.renamed);
  list("deleted", r.deleted);
  j.endObject();
}

}  // namespace dlrr
