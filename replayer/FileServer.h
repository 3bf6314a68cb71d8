#pragma once
// dlreplay's side of data-less replay (docs/replay.md "Files"): before the job starts, the
// scratch directory and, under SCRATCH/served, every path the recording's file facts name,
// rebuilt from the trace (directories with their listed entries, files at their recorded
// size with the bytes the job used; the rest of a large file is a hole). After the job, what
// the replay served and wrote, from SCRATCH/files.log (see replayer/FileRedirect.h).
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "replayer/FileRedirect.h"

namespace dlrr {

class Trace;

struct ServedTree {
  uint64_t paths = 0;  // paths the recording knows (files and directories)
  uint64_t built = 0;  // of which rebuilt under SCRATCH/served (missing here, or --serve-files=always)
  uint64_t bytes = 0;  // recorded bytes written into them
  std::map<std::string, uint64_t> recordedBytes;  // path -> bytes of it the trace holds
  std::vector<std::string> codeSkipped;           // code paths not served (ServePolicy::serveCode)
  std::vector<std::string> secretSkipped;         // credential files: their stat only was recorded
};

// What serving may do with a trace, which is data (docs/reliability.md, "What a replay can
// touch"): never put code where the job would load it, and write at most `budget` bytes.
struct ServePolicy {
  bool serveCode = false;             // --serve-code: serve importable/loadable files too
  std::vector<std::string> codeDirs;  // directories whose files are code (PYTHONPATH, library paths)
  uint64_t budget = 0;                // bytes of data serving may write (0: none); zeros become holes
};

// Whether `path` is something Python imports or the loader loads: .py/.pyc/.pth/.so/a zip
// archive (sys.path entries) and the like, or a file under one of `codeDirs`.
bool isCodePath(const std::string& path, const std::vector<std::string>& codeDirs);

// The trace would make serving write more than the policy's budget.
struct ServeBudgetExceeded : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Creates SCRATCH (mode 0700) and its subdirectories. SCRATCH must not exist, or be an empty
// directory. Throws std::runtime_error with the reason.
void makeScratch(const std::string& scratch);

// Rebuilds the recorded paths under SCRATCH/served (none with ServeFiles::Never), as
// `policy` allows: code paths are skipped (listed in codeSkipped), runs of zeros are left as
// holes, and ServeBudgetExceeded is thrown before writing past the budget.
ServedTree buildServedTree(Trace& trace, const std::string& scratch, ServeFiles serve, const ServePolicy& policy);

struct FilesReport {
  std::vector<std::string> served;   // paths the job read from SCRATCH/served
  uint64_t servedBytes = 0;          // recorded bytes of those
  std::vector<std::string> written;  // paths the job created or changed, still in SCRATCH/written
  std::vector<std::string> deleted;  // paths of the user's it removed (they stay where they are)
  std::vector<std::string> renamed;  // "FROM -> TO"
  std::vector<std::string> dirs;     // directories it made
};

FilesReport readFilesReport(const std::string& scratch, const ServedTree& tree);

// "N paths (B bytes): a, b, c, ..." with at most `shown` paths.
std::string summarizePaths(const std::vector<std::string>& paths, size_t shown);

}  // namespace dlrr
