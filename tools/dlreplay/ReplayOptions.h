#pragma once
// dlreplay's command line: [options] TRACE [--until TARGET] [--debug pdb|gdb|wait] [-- CMD ...].
// Parsing is separate from running so that it can be fuzzed (tests/fuzz/fuzz_cli.cc): it
// never prints or exits. What needs the trace (a step beyond it, a rank it lacks) is checked
// later, by main.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tools/common/Args.h"

namespace dlrr {

// --help's text.
extern const char* const kReplayUsage;

struct ReplayOptions {
  // --help and --version end the parse where they stand (an earlier bad option still wins).
  // --clean-scratch: remove this user's kept scratch directories (ScratchDirs.h), replay nothing.
  enum class Action { Replay, Help, Version, CleanScratch } action = Action::Replay;
  std::string trace;  // not empty when action is Replay
  std::string until;  // "" or a text parseReplayTarget accepts
  std::string debug;  // "", pdb, gdb or wait
  std::string from;   // "", snapshot, start or step=N (ReplayPlan.h)
  std::string stream;
  std::optional<int> rank;  // 0..2^24
  bool allRanks = false;
  std::string serveFiles = "missing";   // missing | always | never
  std::string scratch;                  // "" = a fresh directory in $TMPDIR; else new or empty
  bool hostNetwork = false;             // --net host: the job keeps this machine's network
  bool serveCode = false;               // --serve-code: serve .py/.so/... the trace holds too
  std::optional<uint64_t> serveBudget;  // --serve-budget BYTES
  bool yes = false;
  bool withoutData = false;  // --without-data: batches by reference from the window (DLRR_DATA=absent)
  bool check = false;
  bool dryRun = false;
  bool json = false;
  bool quiet = false;
  std::string whatIf;                  // --what-if INTERVENTION (WhatIf.h), checked; "" for none
  std::optional<int64_t> whatIfSteps;  // --steps N: steps replayed with the change (default: to the end)
  std::vector<std::string> command;
};

// `args` is argv without the program name. Throws tools::UsageError with the message main
// prints after "dlreplay: ".
ReplayOptions parseReplayOptions(const std::vector<std::string>& args);

}  // namespace dlrr
