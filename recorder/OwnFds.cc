#include "recorder/OwnFds.h"

#include <atomic>

namespace dlrr {
namespace {

constexpr int kSlots = 16;
std::atomic<int> gFds[kSlots] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
std::atomic<int> gCount{0};  // slots ever used: a fast "nothing protected" answer

}  // namespace

void protectFd(int fd) noexcept {
  if (fd < 0 || isProtectedFd(fd)) return;
  for (auto& slot : gFds) {
    int expected = -1;
    if (slot.compare_exchange_strong(expected, fd)) {
      gCount.fetch_add(1);
      return;
    }
  }
}

void unprotectFd(int fd) noexcept {
  if (fd < 0) return;
  for (auto& slot : gFds) {
    int expected = fd;
    slot.compare_exchange_strong(expected, -1);
  }
}

void unprotectAllFds() noexcept {
  for (auto& slot : gFds) slot.store(-1);
}

bool isProtectedFd(int fd) noexcept {
  if (fd < 0 || gCount.load(std::memory_order_relaxed) == 0) return false;
  for (auto& slot : gFds)
    if (slot.load(std::memory_order_relaxed) == fd) return true;
  return false;
}

int protectedFdsIn(unsigned first, unsigned last, int* out, int cap) noexcept {
  int n = 0;
  if (gCount.load(std::memory_order_relaxed) == 0) return 0;
  for (auto& slot : gFds) {
    int fd = slot.load(std::memory_order_relaxed);
    if (fd < 0 || static_cast<unsigned>(fd) < first || static_cast<unsigned>(fd) > last || n >= cap) continue;
    int i = n++;
    while (i > 0 && out[i - 1] > fd) {  // insertion sort: at most kSlots entries
      out[i] = out[i - 1];
      --i;
    }
    out[i] = fd;
  }
  return n;
}

}  // namespace dlrr
