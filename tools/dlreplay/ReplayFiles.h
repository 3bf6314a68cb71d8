#pragma once
// dlreplay's file layer (docs/replay.md "Files"): makes the scratch directory, rebuilds the
// recorded files the job will need under it, tells the job where (DLRR_SCRATCH,
// DLRR_SERVE_FILES), and after the job says what was served and what the job wrote.
#include <cstdio>
#include <map>
#include <string>

#include "replayer/FileServer.h"
#include "tools/common/Json.h"

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
  // Returns 0, or the exit code after printing why (the scratch cannot be made, the trace's
  // files cannot be rebuilt).
  int prepare(Trace& trace, const ReplayOptions& o, std::map<std::string, std::string>& env);
  // One or more "dlreplay: files: ..." lines (nothing before prepare()).
  void print(std::FILE* out) const;
  // "files": {...} in the --json report.
  void json(tools::JsonWriter& j) const;

 private:
  FilesReport report() const;
  void removeIfUnused(const FilesReport& r) const;
  std::string scratch_;
  bool ownScratch_ = false;  // made here (not --scratch): removed when the job wrote nothing
  ServedTree tree_;
  bool ready_ = false;
};

}  // namespace dlrr
