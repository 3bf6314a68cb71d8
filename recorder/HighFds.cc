#include "recorder/HighFds.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace dlrr {

int moveAboveFdLimit(int fd) noexcept {
  if (fd < 0) return fd;
  const int savedErrno = errno;  // the job's errno is never ours to change
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY ||
      lim.rlim_cur > kMaxSoftLimitToMoveAbove || static_cast<rlim_t>(fd) >= lim.rlim_cur) {
    errno = savedErrno;
    return fd;
  }
  const int flags = ::fcntl(fd, F_GETFD);
  struct rlimit raised = lim;
  raised.rlim_cur = lim.rlim_cur + kHighFdSlots;
  // A hard limit equal to the soft one (a container's default) is raised too where the
  // process may (CAP_SYS_RESOURCE), and put back with the soft one; elsewhere setrlimit
  // refuses and the descriptor stays.
  if (raised.rlim_max != RLIM_INFINITY && raised.rlim_max < raised.rlim_cur) raised.rlim_max = raised.rlim_cur;
  int moved = -1;
  if (flags >= 0 && ::setrlimit(RLIMIT_NOFILE, &raised) == 0) {
    moved = ::fcntl(fd, (flags & FD_CLOEXEC) ? F_DUPFD_CLOEXEC : F_DUPFD, static_cast<int>(lim.rlim_cur));
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  if (moved >= 0) {
    // The raw syscall: the interposer's close() would refuse a descriptor dlrr protects.
    ::syscall(SYS_close, fd);
    fd = moved;
  }
  errno = savedErrno;
  return fd;
}

}  // namespace dlrr
