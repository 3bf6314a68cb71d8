#include "recorder/OwnMemory.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace dlrr {

bool copyOwnMemory(const void* src, uint64_t n, uint8_t* dst, ReadvFn readv) {
  uint64_t done = 0;
  while (done < n) {
    iovec local{dst + done, n - done};
    iovec remote{const_cast<uint8_t*>(static_cast<const uint8_t*>(src)) + done, n - done};
    ssize_t got = readv(getpid(), &local, 1, &remote, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EPERM || errno == ENOSYS) && done == 0) {
      std::memcpy(dst, src, n);
      return true;
    }
    if (got <= 0) return false;  // EFAULT: part of it is not mapped any more
    done += static_cast<uint64_t>(got);
  }
  return true;
}

}  // namespace dlrr
