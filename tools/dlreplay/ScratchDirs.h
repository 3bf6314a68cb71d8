#pragma once
// dlreplay's own scratch directories ($TMPDIR/dlreplay-XXXXXX): one a replay, kept when the job
// wrote into it (the writes are there to look at), so they pile up. Each is marked as
// dlreplay's and locked while its replay runs; those older than kScratchKeepDays are removed
// when a later replay makes its own, and `dlreplay --clean-scratch` removes every one not in use.
// A directory given with --scratch is the user's: never marked, never removed.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dlrr {

inline constexpr int kScratchKeepDays = 7;

// $TMPDIR when absolute, else /tmp: where dlreplay makes its scratch directories.
std::string scratchParent();

// Marks `dir` (just made by dlreplay) as its own and locks it for as long as the returned
// descriptor stays open (close-on-exec: the job does not hold it). Throws when it cannot.
int claimScratch(const std::string& dir);

// Removes a directory tree, overlayfs's unreadable work directories included.
void removeTree(const std::string& dir);

struct ScratchSweep {
  std::vector<std::string> removed;
  std::vector<std::string> inUse;  // a replay is running in it
  uint64_t bytes = 0;              // removed, on disk
};
// Removes this user's dlreplay scratch directories under `parent` (those older than
// `olderThanDays` by their mark, or all): never one a running replay holds, one of another
// user, one dlreplay did not make (no mark, or not its layout), or anything through a symlink.
ScratchSweep sweepScratch(const std::string& parent, std::optional<int> olderThanDays);

}  // namespace dlrr
