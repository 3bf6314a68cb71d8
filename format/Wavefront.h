#pragma once
// Hangs and desyncs of a distributed job (docs/distributed.md): from each rank's collectives
// and its last CollectiveWait, the wavefront (each rank's last issued and last completed
// collective), where the ranks part, and the suspect rank(s) and why. Pure: unit-tested on
// synthetic positions (tests/unit/WavefrontTest.cc).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dlrr {

struct RankPosition {
  int rank = -1;
  std::map<uint64_t, std::string> ops;  // seq -> op of every collective issued (completed or not)
  std::map<uint64_t, int64_t> stepOf;   // seq -> the step it was issued in
  int64_t lastCompleted = -1;           // seq, -1 none
  std::optional<uint64_t> inFlight;     // issued and never completed (waiting when it stopped, or failed)
  int64_t steps = 0;                    // steps completed
  std::optional<int> exitCode;          // the process exited (no exit: killed, or still running)
  bool terminated = false;              // its watch saw the launcher's SIGTERM
  std::string waitReason;               // the last CollectiveWait's reason ("" none)
  double waitedSeconds = 0;
  std::string stackLine;   // innermost frame of the job's own code then ("f.py:12 in g: code")
  std::string stacks;      // every Python thread's stack then
  bool subgroups = false;  // it issued a collective on a group other than the world
};

struct HangFinding {
  bool desync = false;
  uint64_t seq = 0;  // the collective where the ranks part
  std::string op;    // what the ranks waiting there (the majority) issued
  int64_t step = -1;
  std::vector<int> waiting;            // ranks that issued it
  std::vector<int> suspects;           // ranks that never reached it, or issued something else
  std::string location;                // the first suspect's innermost frame of its own code, when known
  std::string summary;                 // one line
  std::vector<std::string> why;        // one line per suspect
  std::vector<std::string> wavefront;  // one line per rank
};

// The stack's innermost frame of the job's own code, in its first thread ("train.py:12 in
// load: time.sleep(9)"): not the standard library nor an installed package.
std::string innermostUserFrame(const std::string& stacks);
// Nothing when the ranks never parted (all issued the same collectives and none was left waiting),
// and nothing for a job with process subgroups: collectives are numbered per process, and ranks
// of different subgroups legitimately issue different numbers of them (not analysed yet).
std::optional<HangFinding> findHang(const std::vector<RankPosition>& ranks);

}  // namespace dlrr
