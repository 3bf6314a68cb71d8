#pragma once
// `dlreplay --all-ranks` of ranks that were started by hand (one dlrecord each, no torchrun):
// dlreplay is their launcher. Pure parts (what each rank runs with, which rank's end is the
// job's) apart from the one effect, picking a free port.
#include <vector>

#include "tools/common/ChildProcess.h"
#include "tools/dlreplay/AllRanksOutcome.h"
#include "tools/dlreplay/ReplayEnvironment.h"
#include "tools/dlreplay/ReplaySelection.h"

namespace dlrr {

// A TCP port on 127.0.0.1 free now (the kernel's pick); 0 when none could be had.
int freeLocalPort();

// One launch per rank: its recorded command and working directory, the replay's environment
// with its recorded rendezvous variables, meeting at 127.0.0.1:`port` (the recorded address
// may be another host, and the recorded port taken).
std::vector<tools::LaunchSpec> rankLaunchSpecs(const ReplaySelection& s, const Environment& env, int port);

// Whether rank launch i's wait status is the end its rank had in the recording (exit 0 when
// none was recorded). A rank that ends otherwise stops the others, which a faithful replay
// must not do to peers that finished in the recording.
bool endsAsRecorded(const ReplaySelection& s, size_t i, int waitStatus);

// The end to judge the job by: the first rank that ended otherwise than recorded and failed by
// itself, else one that was stopped after a peer failed; "the ranks" with status 0 when every
// rank ended as recorded. `children` in the order of s.rankLaunches.
ProcessEnd rankEnd(const ReplaySelection& s, const std::vector<tools::ChildResult>& children);

}  // namespace dlrr
