#pragma once
// Records a fatal signal from inside the signal handler: one Failure event (signal, fault
// address, native stack with symbols from /proc/self/maps, the Python stacks faulthandler
// dumped) built in memory allocated beforehand and written with the stream writer's
// signal-path write. Async-signal-safe once constructed.
#include <capnp/common.h>
#include <signal.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "format/StreamWriter.h"

namespace dlrr {

class CrashRecorder {
 public:
  CrashRecorder();  // allocates the buffers the signal path uses

  // ips[faultFrame] is where the fault happened (the failure's `where`). `pystackFd`: the file
  // faulthandler wrote the Python stacks to (read back from its start), or -1.
  void write(StreamWriter& w, int64_t tNs, int64_t step, uint32_t thread, int sig, const siginfo_t* info,
             const uint64_t* ips, int nips, int faultFrame, int pystackFd) noexcept;

 private:
  // The message (words are not copyable: a vector of them does not build with clang).
  static constexpr size_t kArenaWords = 32768;  // 256 KiB
  std::unique_ptr<capnp::word[]> arena_;
  std::vector<char> pyText_;    // the Python stacks
  std::vector<char> mapsText_;  // /proc/self/maps, then the flat message written out
};

}  // namespace dlrr
