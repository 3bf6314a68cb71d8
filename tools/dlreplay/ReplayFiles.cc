#include "tools/dlreplay/ReplayFiles.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>
#include <stdexcept>

#include "format/Trace.h"
#include "format/TraceError.h"
#include "tools/common/ExitCodes.h"
#include "tools/common/Text.h"
#include "tools/dlreplay/ReplayOptions.h"
#include "tools/dlreplay/ScratchDirs.h"

namespace dlrr {
namespace {

constexpr size_t kShown = 5;

std::string freshScratch() {
  std::string tmpl = scratchParent() + "/dlreplay-XXXXXX";
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("cannot create " + tmpl + ": " + std::strerror(errno));
  return tmpl;
}

// Paths of `more` not yet in `to`, appended.
void addNew(std::vector<std::string>& to, const std::vector<std::string>& more) {
  std::set<std::string> have(to.begin(), to.end());
  for (const auto& p : more)
    if (have.insert(p).second) to.push_back(p);
}

// The trace directory's size on disk.
uint64_t traceBytes(const std::string& dir) {
  uint64_t n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.is_regular_file(ec)) n += e.file_size(ec);
  return n;
}

ServePolicy servePolicy(const ReplayOptions& o, const std::map<std::string, std::string>& env) {
  ServePolicy p;
  p.serveCode = o.serveCode;
  // Where the job's interpreter and loader look for code: the replay's environment (the
  // recorded one, or this machine's where a foreign trace's is not used) and this machine's.
  for (const char* var : {"PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "LD_LIBRARY_PATH", "PATH"}) {
    std::string values = env.count(var) ? env.at(var) : "";
    if (const char* mine = std::getenv(var)) values += std::string(":") + mine;
    for (size_t at = 0; at <= values.size();) {
      size_t colon = values.find(':', at);
      if (colon == std::string::npos) colon = values.size();
      std::string d = values.substr(at, colon - at);
      if (!d.empty() && d[0] == '/' && d != "/") p.codeDirs.push_back(d);
      at = colon + 1;
    }
  }
  constexpr uint64_t kBase = 256ull << 20, kFactor = 16;
  p.budget = o.serveBudget ? *o.serveBudget : kBase + kFactor * traceBytes(o.trace);
  return p;
}

}  // namespace

int ReplayFiles::prepare(Trace& trace, const ReplayOptions& o, std::map<std::string, std::string>& env,
                         const std::vector<std::string>& writable, const std::string& weakWhy) {
  ServeFiles serve = o.serveFiles == "always"  ? ServeFiles::Always
                     : o.serveFiles == "never" ? ServeFiles::Never
                                               : ServeFiles::Missing;
  try {
    if (o.scratch.empty()) {
      sweepOld(o.quiet);
      scratch_ = freshScratch();
      ownScratch_ = true;
      scratchLock_ = claimScratch(scratch_);
    } else {
      std::error_code ec;
      scratch_ = std::filesystem::absolute(o.scratch, ec).lexically_normal().string();
      if (scratch_.size() > 1 && scratch_.back() == '/') scratch_.pop_back();
      // A directory with anything in it (`--scratch .`) would be the job's to write through.
      if (std::filesystem::is_directory(scratch_, ec) &&
          std::filesystem::directory_iterator(scratch_, ec) != std::filesystem::directory_iterator()) {
        std::fprintf(stderr, "dlreplay: --scratch %s is not empty; give a new or empty directory\n",
                     tools::printable(o.scratch).c_str());
        return kExitUsage;
      }
    }
    makeScratch(scratch_);
    tree_ = buildServedTree(trace, scratch_, serve, servePolicy(o, env));
  } catch (const ServeBudgetExceeded& e) {
    std::fprintf(stderr,
                 "dlreplay: %s; a trace is data and this one is larger unpacked than it should be: "
                 "--serve-budget BYTES allows more, --serve-files never serves nothing\n",
                 tools::printable(e.what()).c_str());
    return kExitIo;
  } catch (const TraceError& e) {
    std::fprintf(stderr, "dlreplay: cannot rebuild the recorded files: %s\n", e.what());
    return kExitIo;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dlreplay: scratch directory: %s\n", e.what());
    return kExitIo;
  }
  env["DLRR_SCRATCH"] = scratch_;
  env["DLRR_SERVE_FILES"] = o.serveFiles;
  ready_ = true;
  std::string why = weakWhy;
  if (why.empty() && std::getenv("DLRR_NO_SANDBOX")) why = "DLRR_NO_SANDBOX is set";
  if (why.empty()) {
    try {
      tools::SandboxSpec spec;
      spec.dir = scratch_ + "/overlay";
      spec.writable = writable;
      spec.writable.push_back(scratch_);  // the libc layer's served files and its log
      spec.hostNetwork = o.hostNetwork;
      auto box = std::make_unique<tools::Sandbox>(spec);
      why = box->probe();
      if (why.empty()) sandbox_ = std::move(box);
      if (sandbox_) env["DLRR_ISOLATION"] = "kernel";  // the libc layer leaves writes to the overlay
    } catch (const std::exception& e) {
      why = e.what();
    }
  }
  isolation_ = sandbox_
                   ? std::string("kernel: the job's own mount") + (o.hostNetwork ? " and PID" : ", PID and network") +
                         " namespaces over an overlay of this machine's files"
                   : "libc hooks only (weak): " + why;
  return 0;
}

ReplayFiles::~ReplayFiles() {
  if (ready_) {
    try {
      removeIfUnused(report());
    } catch (...) {  // best effort: a leftover empty work directory; never out of a destructor
    }
  } else if (ownScratch_) {
    removeTree(scratch_);  // made, but the replay never got as far as the job
  }
  if (scratchLock_ >= 0) ::close(scratchLock_);
}

void ReplayFiles::discard() {
  if (ownScratch_) removeTree(scratch_);
  ready_ = false;
  ownScratch_ = false;
}

void ReplayFiles::sweepOld(bool quiet) {
  ScratchSweep s = sweepScratch(scratchParent(), kScratchKeepDays);
  if (!s.removed.empty() && !quiet)
    std::fprintf(stderr, "dlreplay: removed %zu scratch director%s of replays older than %d days (%s)\n",
                 s.removed.size(), s.removed.size() == 1 ? "y" : "ies", kScratchKeepDays,
                 tools::humanBytes(s.bytes).c_str());
}

FilesReport ReplayFiles::report() const {
  FilesReport r = readFilesReport(scratch_, tree_);
  if (sandbox_) {  // what reached the overlay, whatever call made it (the libc layer's, above, too)
    tools::OverlayChanges c = tools::readOverlayChanges(sandbox_->layers());
    addNew(r.written, c.written);
    addNew(r.deleted, c.removed);
    addNew(r.dirs, c.dirs);
  }
  return r;
}

void ReplayFiles::print(std::FILE* out) const {
  if (!ready_) return;
  FilesReport r = report();
  std::fprintf(out, "dlreplay: isolation: %s\n", tools::printable(isolation_).c_str());
  if (!tree_.secretSkipped.empty())
    std::fprintf(out, "dlreplay: files: not served, being credentials (the recording kept their stat only): %s\n",
                 tools::printable(summarizePaths(tree_.secretSkipped, kShown)).c_str());
  if (!tree_.codeSkipped.empty())
    std::fprintf(out, "dlreplay: files: not served, being code (a trace is data; --serve-code serves it): %s\n",
                 tools::printable(summarizePaths(tree_.codeSkipped, kShown)).c_str());
  if (!r.served.empty())
    std::fprintf(out, "dlreplay: files: served %zu path(s) from the trace (%s recorded): %s\n", r.served.size(),
                 tools::humanBytes(r.servedBytes).c_str(), tools::printable(summarizePaths(r.served, kShown)).c_str());
  size_t changes = r.written.size() + r.deleted.size() + r.renamed.size() + r.dirs.size();
  if (changes) {
    std::fprintf(out, "dlreplay: files: the job's writes went to %s (your files were not modified)\n",
                 tools::printable(scratch_ + "/written").c_str());
    if (ownScratch_)
      std::fprintf(out,
                   "dlreplay: files: kept for you to look at; remove it with 'rm -rf %s', or every replay's "
                   "with 'dlreplay --clean-scratch' (those older than %d days go at the next replay)\n",
                   tools::printable(scratch_).c_str(), kScratchKeepDays);
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
  removeTree(scratch_);  // the job wrote nothing: the served copies are in the trace, nothing to keep
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
  j.field("isolation", isolation_);
  list("served", r.served);
  list("code_not_served", tree_.codeSkipped);
  list("credentials_not_served", tree_.secretSkipped);
  list("written", r.written);
  list("dirs", r.dirs);
  list("renamed", r.renamed);
  list("deleted", r.deleted);
  j.endObject();
}

}  // namespace dlrr
