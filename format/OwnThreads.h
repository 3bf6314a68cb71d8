#pragma once
// Threads dlrr itself runs inside the job's process (trace writer, GPU recorder). The job's view
// of /proc/self/stat leaves them out (interpose/FileHooks.cc): Python 3.12+ reads the thread
// count there at every os.fork() and warns on stderr when it is above one, so without this a
// single-threaded job would print a warning it never prints without dlrr. Counted before a
// thread starts, uncounted after it is joined, and reset to 0 in a forked child.
#include <atomic>

namespace dlrr {

inline std::atomic<int>& ownThreads() noexcept {
  static std::atomic<int> n{0};
  return n;
}

}  // namespace dlrr
