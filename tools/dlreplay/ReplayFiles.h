#pragma once
// dlreplay's file layer (docs/replay.md "Files"): makes the scratch directory, rebuilds the
// recorded files the job will need under it, tells the job where (DLRR_SCRATCH,
// DLRR_SERVE_FILES), and after the job says what was served and what the job wrote.
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "replayer/FileServer.h"
#include "tools/common/Json.h"
#include "tools/common/Sandbox.h"

namespace dlrr {

class Trace;
struct ReplayOptions;

class ReplayFiles {
 public:
  ReplayFiles() = default;
  ReplayFiles(const ReplayFiles&) = delete;
  ReplayFiles& operator=(const ReplayFiles&) = delete;
  // Whatever way dlreplay ends (the command cannot run, an error), a scratch directory it
  // made is not left behind unless the job wrote into it.
  ~ReplayFiles();
  // Returns 0, or the exit code after printing why (the scratch cannot be made or is not new
  // or empty, the trace's files cannot be rebuilt). Also makes the job's sandbox (Sandbox.h),
  // through which `writable` (dlreplay's own files: the report) stay the real ones, unless
  // `weakWhy` says why not (then, or when the kernel refuses, the libc layer alone).
  int prepare(Trace& trace, const ReplayOptions& o, std::map<std::string, std::string>& env,
              const std::vector<std::string>& writable, const std::string& weakWhy);
  // The job's sandbox, or null (isolation by the libc hooks alone: isolation() says why).
  const tools::Sandbox* sandbox() const { return sandbox_.get(); }
  // "kernel: ..." or "libc hooks only (weak): WHY", for every report.
  const std::string& isolation() const { return isolation_; }
  // One or more "dlreplay: files: ..." lines (nothing before prepare()).
  void print(std::FILE* out) const;
  // Removes a scratch directory made here, whatever the job wrote: a run dlreplay made for
  // itself (a second computation), none of whose writes anyone is shown.
  void discard();
  // "files": {...} in the --json report.
  void json(tools::JsonWriter& j) const;

 private:
  FilesReport report() const;
  void removeIfUnused(const FilesReport& r) const;
  // Removes this user's scratch directories of replays older than kScratchKeepDays.
  static void sweepOld(bool quiet);
  std::string scratch_;
  bool ownScratch_ = false;  // made here (not --scratch): removed when the job wrote nothing
  int scratchLock_ = -1;     // its mark, locked while this replay runs (ScratchDirs.h)
  ServedTree tree_;
  std::unique_ptr<tools::Sandbox> sandbox_;
  std::string isolation_;
  bool ready_ = false;
};

}  // namespace dlrr
