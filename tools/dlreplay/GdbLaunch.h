#pragma once
// `dlreplay --debug gdb`: the job runs under gdb, which stops it where the replay stops
// (dlrr_replay_stopped) or where it faults. Under gdb dlreplay's child is gdb, whose exit status
// is not the job's: at the job's first stop gdb writes into a status file the signal it stopped
// at (SIGTRAP: our breakpoint) or died of, and its exit code when it ended instead; the job's
// wait status is taken from there.
#include <string>
#include <vector>

namespace dlrr {

// gdb's command line running `command`; `interactive`: a terminal is attached (else gdb runs
// in batch mode, prints a backtrace at the stop and kills the job).
std::vector<std::string> gdbCommand(const std::vector<std::string>& command, const std::string& statusPath,
                                    bool interactive);

// The job's wait status from the status file gdb wrote; `gdbStatus` when it holds nothing usable.
int jobStatusUnderGdb(const std::string& statusPath, int gdbStatus);

}  // namespace dlrr
