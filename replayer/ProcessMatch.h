// Which recorded stream a replayed process is: its command line against the stream's.
#pragma once

#include <string>
#include <vector>

namespace dlrr {

// True when `replayed` is the command `recorded` ran: the same program (by base name) and
// arguments. The arguments multiprocessing gives a spawned (or forkserver) child,
// `-c 'from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=16, pipe_handle=18)'`,
// hold descriptor numbers of the moment, which replay need not reproduce (the recorder's own
// files were open then): their digits are not compared.
bool sameCommand(const std::vector<std::string>& recorded, const std::vector<std::string>& replayed);

// True for a child that Python's multiprocessing started with exec (spawn, forkserver): several
// such children of one job have the same command once descriptors are ignored, so each
// recorded stream is claimed by the first replayed child that matches it.
bool isMultiprocessingChild(const std::vector<std::string>& argv);

}  // namespace dlrr
