#pragma once
// dlrecord's command line: [options] [-o TRACE] -- CMD [ARGS...]. Parsing is separate from
// running so that it can be fuzzed (tests/fuzz/fuzz_cli.cc): it never prints or exits.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "format/Redact.h"
#include "tools/common/Args.h"

namespace dlrr {

// --help's text.
extern const char* const kRecordUsage;

struct RecordOptions {
  // --help and --version end the parse where they stand (an earlier bad option still wins).
  enum class Action { Record, Help, Version } action = Action::Record;
  std::string output;
  std::string capture = "default";     // minimal | default | full
  int ringSteps = 2;                   // 0..64
  std::string hangAfter = "60";        // seconds (hang_watch.py), 0 = off
  std::string collectives = "digest";  // digest | full
  std::string snapshotEvery = "auto";  // auto | off | SECONDS | Nsteps (snapshots.py)
  std::string batches = "all";         // all | window (batches by reference, docs/recording.md)
  int window = 16;                     // --window K: steps whose batch bytes are held (1..4096)
  uint64_t budget = 0;                 // --budget SIZE in bytes (0: not given, defaultBudget())
  std::vector<std::string> redact = defaultRedactPatterns();
  bool quiet = false;
  std::vector<std::string> command;  // not empty when action is Record
};

// `args` is argv without the program name. Throws tools::UsageError with the message main
// prints after "dlrecord: ".
// dlrecord --snapshot-every's values.
bool validSnapshotEvery(const std::string& v);

RecordOptions parseRecordOptions(const std::vector<std::string>& args);

// --budget's values: a positive whole number of bytes with an optional K, M, G or T (powers of
// 1024; "KiB", "MB", ... read the same); nullopt when `text` is not one.
std::optional<uint64_t> parseSize(const std::string& text);
// The budget when --budget is not given: half the space free to the user on the file system
// that will hold `trace` (its parent directory), at least 64 MiB.
uint64_t defaultBudget(const std::string& trace);

}  // namespace dlrr
