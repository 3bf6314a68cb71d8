#pragma once
// Resource high-water marks and limits of the current process (or, for the launcher, of its
// children): what triage needs to tell an out-of-memory failure from a bug. Plain reads of
// getrusage, /proc and the memory cgroup (v1 or v2); each figure is 0 when unknown.
#include <cstdint>
#include <string>
#include <string_view>

namespace dlrr {

struct ResourceSample {
  uint64_t maxRssBytes = 0;
  uint64_t vmPeakBytes = 0;
  uint64_t addressSpaceLimit = 0;  // RLIMIT_AS soft limit, 0 = unlimited
  uint64_t memoryLimit = 0;        // cgroup limit, 0 = none or unknown
  uint64_t memTotal = 0;
  uint64_t cpuUserNs = 0;
  uint64_t cpuSystemNs = 0;
};

// getrusage(RUSAGE_SELF) only: cheap enough for every step commit.
ResourceSample sampleSelfQuick() noexcept;
// Everything: getrusage, VmPeak/VmHWM from /proc/self/status, RLIMIT_AS, the cgroup memory
// limit, MemTotal.
ResourceSample sampleSelfFull() noexcept;
// The limits and machine figures only (for the launcher, which takes peaks from wait4).
void fillLimits(ResourceSample& s) noexcept;

// OOM kills counted by this process's memory cgroup so far (v2 memory.events oom_kill, v1
// memory.oom_control oom_kill); -1 when unknown.
int64_t cgroupOomKills() noexcept;

// Parsers, for tests.
// "VmPeak:\t  123 kB" -> 123 * 1024 (0 when absent).
uint64_t parseStatusKb(std::string_view procStatus, std::string_view key);
// The cgroup path of the memory controller from /proc/self/cgroup text (v1 "N:memory:/p" or
// "N:cpu,memory:/p"; else v2 "0::/p"); sets v2 accordingly. "" when none.
std::string memoryCgroupPath(std::string_view procSelfCgroup, bool& v2);
// memory.max / memory.limit_in_bytes text -> bytes; 0 for "max" or absurdly large values.
uint64_t parseMemoryLimit(std::string_view text);
// "oom_kill N" line of memory.events / memory.oom_control; -1 when absent.
int64_t parseOomKill(std::string_view text);

}  // namespace dlrr
