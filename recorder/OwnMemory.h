#pragma once
// Copying bytes of this process that may no longer be mapped: the failure ring's borrowed entries
// (FailureRing.h) point at tensors the job may have freed since their hook.
#include <sys/types.h>
#include <sys/uio.h>

#include <cstdint>

namespace dlrr {

// process_vm_readv's signature: the seam the tests replace to reach every branch.
using ReadvFn = ssize_t (*)(pid_t, const iovec*, unsigned long, const iovec*, unsigned long, unsigned long);

// Copies n bytes at src into dst with process_vm_readv on this process, not with loads: memory
// unmapped since (a storage `resize_`d larger) gives EFAULT where a load would kill the job.
// False when part of it is not mapped. Where a seccomp filter forbids the syscall (EPERM or
// ENOSYS at the first call: old container profiles) the bytes are read directly, as a copying
// ring would have.
bool copyOwnMemory(const void* src, uint64_t n, uint8_t* dst, ReadvFn readv = ::process_vm_readv);

}  // namespace dlrr
