#pragma once
// Compares the kernel launches of one step, as recorded and as replayed (docs/gpu.md).
//
// Launches are compared in sequence order by kernel name, grid, block and dynamic shared
// memory; streams and devices are not compared (stream handles and ordinals are the process's
// own choice). Grid/block are compared only when both sides know them. A sequence with a gap
// (records dropped because a ring was full) is compared up to the gap only.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dlrr {

struct KernelLaunch {
  uint32_t seq = 0;
  std::string name;
  uint32_t grid[3] = {0, 0, 0};
  uint32_t block[3] = {0, 0, 0};
  uint32_t sharedMem = 0;
  uint32_t device = 0;
  uint32_t flags = 0;   // LaunchTracker RecordFlags (geometry known: 4 or 8)
  uint32_t nameId = 0;  // the stream's InternedString id (not compared: ids are per process)
  bool geometryKnown() const { return (flags & (4u | 8u)) != 0; }
};

struct LaunchComparison {
  bool match = true;
  size_t compared = 0;  // launches compared (the common, gap-free prefix)
  size_t recorded = 0;
  size_t replayed = 0;
  bool truncated = false;          // a gap (dropped records) limited the comparison
  std::optional<size_t> position;  // first differing launch (its seq), when !match
  std::string detail;              // "launch 12 of step 3: recorded K grid (..) ...; replayed ..."
};

// complete: the replayed step has ended, so a shorter (or longer) replayed sequence is a
// difference; otherwise (a stop in the middle of the step) only the replayed prefix counts.
LaunchComparison compareLaunches(int64_t step, std::vector<KernelLaunch> recorded, std::vector<KernelLaunch> replayed,
                                 bool complete);

// "name grid (x,y,z) block (x,y,z) smem N" for reports.
std::string describeLaunch(const KernelLaunch& l);

}  // namespace dlrr
