#include "recorder/TraceBudget.h"

#include <unistd.h>

#include "format/TraceDir.h"

namespace dlrr {

uint64_t TraceBudget::used() const { return traceBytes(dirFd_); }

std::vector<TraceBudget::Bulk> TraceBudget::makeRoom(uint64_t extra, uint64_t& usedAfter) {
  std::vector<Bulk> dropped;
  usedAfter = used();
  while (limit_ && usedAfter + extra > limit_ && bulk_.size() > 1) {
    Bulk b = std::move(bulk_.front());
    bulk_.pop_front();
    if (::unlinkat(dirFd_, b.file.c_str(), 0) != 0) continue;  // gone already: nothing to free
    dropped.push_back(std::move(b));
    usedAfter = used();
  }
  return dropped;
}

}  // namespace dlrr
