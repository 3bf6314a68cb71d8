#pragma once
// dlrr's own descriptors (the trace stream, the trace directory, the pystack file, the status
// pipe, libunwind's validation pipe) live above the job's soft RLIMIT_NOFILE, so that a job
// near its limit can open exactly as many files as it would without dlrr (issue: a job at
// its limit failed seven files earlier when recorded).
//
// How: raise the soft limit by kSlots for an instant, F_DUPFD the descriptor to the lowest
// free number at or above the old limit, put the limit back. The kernel checks the limit only
// when it allocates a number, so descriptors above it stay valid, and the job's getrlimit()
// sees its own limit. Where that is not possible (no headroom below the hard limit that the
// process may raise, a soft
// limit so large that growing the descriptor table would cost more than it saves: every fork
// copies that table), the descriptor stays where it is: the job then has fewer, as before.
namespace dlrr {

// Returns the descriptor's new number (the old one is closed), or fd unchanged where it
// cannot move or is already above the limit. Keeps FD_CLOEXEC as it was. Callers serialise
// their moves (RecordSession's mutex, or one thread at start-up): two at once would each put
// back the other's raised limit. The job's own threads may run meanwhile: at worst one of
// them sees the raised limit for the instant between two setrlimit calls.
int moveAboveFdLimit(int fd) noexcept;

// The largest soft limit for which descriptors are moved (the table then grows to at most
// this many entries plus kSlots; 64 Ki entries is half a megabyte of kernel memory).
inline constexpr unsigned long kMaxSoftLimitToMoveAbove = 65536;
// How many numbers above the limit dlrr may use at once in one process.
inline constexpr unsigned long kHighFdSlots = 16;

}  // namespace dlrr
