// copyOwnMemory (recorder/OwnMemory.h): every branch, the syscall replaced where the kernel would
// not take it (a seccomp filter) or would interrupt it.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <numeric>
#include <vector>

#include "recorder/OwnMemory.h"

namespace dlrr {
namespace {

std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> v(n);
  std::iota(v.begin(), v.end(), uint8_t{7});
  return v;
}

TEST(OwnMemory, CopiesMappedBytes) {
  std::vector<uint8_t> src = pattern(10000), dst(src.size());
  ASSERT_TRUE(copyOwnMemory(src.data(), src.size(), dst.data()));
  EXPECT_EQ(dst, src);
}

TEST(OwnMemory, UnmappedBytesAreFalseNotAFault) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  ASSERT_EQ(munmap(static_cast<char*>(p) + page, page), 0);
  std::vector<uint8_t> dst(2 * page);
  EXPECT_FALSE(copyOwnMemory(p, 2 * page, dst.data()));
  ASSERT_EQ(munmap(p, page), 0);
}

// A seccomp filter that forbids the syscall answers EPERM (or ENOSYS): the bytes are read
// directly, whole.
TEST(OwnMemory, ForbiddenSyscallFallsBackToADirectRead) {
  for (int forbidden : {EPERM, ENOSYS}) {
    static int error;
    error = forbidden;
    ReadvFn refuse = [](pid_t, const iovec*, unsigned long, const iovec*, unsigned long, unsigned long) -> ssize_t {
      errno = error;
      return -1;
    };
    std::vector<uint8_t> src = pattern(5000), dst(src.size());
    ASSERT_TRUE(copyOwnMemory(src.data(), src.size(), dst.data(), refuse)) << forbidden;
    EXPECT_EQ(dst, src) << forbidden;
  }
}

// EINTR is retried; a short read goes on from where it stopped; a refusal after some bytes were
// copied is not taken for a seccomp filter (the syscall worked before): false.
TEST(OwnMemory, InterruptedAndShortReadsGoOnAndALateRefusalIsFalse) {
  static int calls;
  calls = 0;
  ReadvFn bumpy = [](pid_t pid, const iovec* l, unsigned long nl, const iovec* r, unsigned long nr,
                     unsigned long f) -> ssize_t {
    ++calls;
    if (calls == 1) {
      errno = EINTR;
      return -1;
    }
    iovec shortLocal{l->iov_base, l->iov_len > 100 ? 100 : l->iov_len};
    iovec shortRemote{r->iov_base, shortLocal.iov_len};
    return ::process_vm_readv(pid, &shortLocal, nl, &shortRemote, nr, f);
  };
  std::vector<uint8_t> src = pattern(1000), dst(src.size());
  ASSERT_TRUE(copyOwnMemory(src.data(), src.size(), dst.data(), bumpy));
  EXPECT_EQ(dst, src);
  EXPECT_EQ(calls, 11);  // one interrupted, then ten reads of 100 bytes

  ReadvFn lateRefusal = [](pid_t pid, const iovec* l, unsigned long nl, const iovec* r, unsigned long nr,
                           unsigned long f) -> ssize_t {
    if (l->iov_len < 1000) {  // the second call, after 500 bytes
      errno = EPERM;
      return -1;
    }
    iovec half{l->iov_base, 500};
    iovec halfRemote{r->iov_base, 500};
    return ::process_vm_readv(pid, &half, nl, &halfRemote, nr, f);
  };
  std::vector<uint8_t> out(src.size());
  EXPECT_FALSE(copyOwnMemory(src.data(), src.size(), out.data(), lateRefusal));
}

}  // namespace
}  // namespace dlrr
