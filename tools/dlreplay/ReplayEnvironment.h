#pragma once
// The replayed job's environment (docs/replay.md "Environment"): the recording's variables,
// with the values redacted at record time taken from dlreplay's own environment when it has
// them, the terminal's variables dlreplay's, dlrr's library and hook put first, and the
// DLRR_* settings that tell the job's library what to replay. Pure: the caller passes its own
// environment, so it is unit-tested (tests/unit/ReplayEnvironmentTest.cc).
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "format/Trace.h"
#include "tools/dlrecord/InstallPaths.h"

namespace dlrr {

using Environment = std::map<std::string, std::string>;
// getenv for dlreplay's own environment (nullptr: unset).
using EnvLookup = std::function<const char*(const char*)>;

// The recording's environment as the job will see it, before the replay settings. `note` is set
// when GPU capture is off (another CUDA injection library is configured). `trusted` false (a
// foreign trace without consent): the variables that choose what code runs
// (executionVariable) are this machine's, not the trace's; `withheld` lists the names whose
// recorded value was not used.
Environment recordedEnvironment(schema::TraceInfo::Reader recorded, const InstallPaths& paths, const EnvLookup& ours,
                                std::string& note, bool trusted = true, std::vector<std::string>* withheld = nullptr);

// LD_*, PYTHON* and PATH: the variables that decide which code the interpreter, the loader and
// the shell load.
bool executionVariable(const std::string& name);

// What the job's library replays, and how.
struct ReplaySettings {
  std::string trace;   // absolute path of the trace
  std::string stream;  // the stream replayed, or kEachRank
  // A rank replayed alone: what torchrun told it (RANK, WORLD_SIZE, MASTER_*, ...).
  bool rankAlone = false;
  std::vector<std::pair<std::string, std::string>> rankEnv;
  bool allRanks = false;
  std::string until;         // DLRR_UNTIL
  std::string reportPath;    // where the library writes its report
  int64_t jumpStep = -1;     // jump replay's snapshot step (-1: from step 0)
  std::string library;       // libdlrr.so (for processes the job starts)
  std::string debug;         // "", pdb, gdb, wait
  bool progress = false;     // a progress line on the terminal
  bool withoutData = false;  // --without-data
  // --what-if (WhatIf.h): the change, the step it starts at, the steps replayed with it (0: all).
  std::string whatIf;
  int64_t whatIfFrom = -1;
  int64_t whatIfSteps = 0;
};

void applyReplaySettings(Environment& env, const ReplaySettings& s);

// "K=V" strings, ordered by name.
std::vector<std::string> environmentStrings(const Environment& env);

}  // namespace dlrr
