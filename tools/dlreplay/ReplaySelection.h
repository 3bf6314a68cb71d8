#pragma once
// What one dlreplay run replays, decided from the trace and the options before anything runs
// (the first phase of dlreplay, as rr's ReplayCommand resolves its session before replaying):
// the stream (a process, one rank alone, or every rank), the recorded steps and failure its
// target refers to, the target, the jump plan, and the command with its working directory.
// Everything the trace cannot honour is refused here with the exit code and lines to print,
// so a replay never starts only to fail on something known beforehand.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "format/Trace.h"
#include "replayer/ReplayTarget.h"
#include "tools/dlreplay/ReplayOptions.h"
#include "tools/dlreplay/ReplayPlan.h"
#include "triage/Facts.h"
#include "triage/Ranks.h"

namespace dlrr {

struct ReplaySelection {
  RankReport ranks;                  // the trace's ranks (empty: not a distributed trace)
  std::optional<RankStatus> rank;    // --rank (chosen or given): that rank replays alone
  bool allRanks = false;             // --all-ranks (given, or needed: collective results not kept)
  StreamReader* stream = nullptr;    // the stream replayed (the main one, a named one, a rank's)
  StreamReader* launcher = nullptr;  // the launcher stream (command, environment)
  TraceSummary summary;              // steps and failure: the replayed stream's for a rank
  triage::TriageInput facts;         // for --check and the pre-flight environment check
  bool checkExit = false;            // --check of a job that failed with an exit status alone (no exception, signal)
  std::string until;                 // the target's text as the job's library takes it (DLRR_UNTIL)
  ReplayTarget target;
  JumpPlan jump;
  std::vector<std::string> command;  // the command replayed (recorded, a rank's, or given)
  // --all-ranks of ranks that were started by hand (one dlrecord each, no torchrun): dlreplay
  // starts every rank itself, each with its recorded command and rendezvous variables; empty
  // when one command (the launcher's, or the user's) starts them.
  struct RankLaunch {
    int rank = -1;
    std::vector<std::string> argv;
    std::string cwd;
    std::vector<std::pair<std::string, std::string>> distEnv;  // RANK, WORLD_SIZE, MASTER_ADDR, ... as recorded
  };
  std::vector<RankLaunch> rankLaunches;
  bool explicitCommand = false;  // given after '--'
  std::string cwd;
  // Several trainers at once, or processes that were not recorded (triage/Concurrency.h): why
  // a replay of this one stream cannot show the job deterministic ("" when nothing of the kind).
  std::string concurrencyCaveat;
};

// A replay the trace and options cannot give: the exit code, and what to print (each line
// after "dlreplay: ").
struct ReplayRefusal {
  int exitCode = 0;
  std::vector<std::string> lines;
};

struct SelectionResult {
  std::vector<std::string> notes;  // said whatever follows ("replaying rank 1 alone ...")
  std::optional<ReplaySelection> selection;
  ReplayRefusal refusal;  // when no selection
};

// `options` as parsed; `cudaDevicePresent`: whether this machine can replay a GPU job.
SelectionResult selectReplay(Trace& trace, const ReplayOptions& options, bool cudaDevicePresent);

}  // namespace dlrr
