#pragma once
// The file descriptors a recording process keeps open for itself (its stream, the trace
// directory, the pystack file, the status pipe). The job may close fds it does not know
// about (os.closerange(3, N), closefrom(), a daemonising library), and its next open() would
// get the same number: the writer would then write trace frames into the job's own file. The
// interposer's close(), close_range() and closefrom() leave these fds open (and report
// success), so the numbers are never reused under us. Lock-free and async-signal-safe.
namespace dlrr {

void protectFd(int fd) noexcept;
void unprotectFd(int fd) noexcept;
void unprotectAllFds() noexcept;  // a forked child: its copies are not ours to keep
bool isProtectedFd(int fd) noexcept;
// Fills out[] with the protected fds in [first, last], sorted; returns how many.
int protectedFdsIn(unsigned first, unsigned last, int* out, int cap) noexcept;

}  // namespace dlrr
