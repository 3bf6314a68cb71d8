// fork() while another thread is inside the replay session: the prepare handler (beforeFork)
// holds its lock across fork(), so a child (a forked trainer taking the stream over, a worker
// whose hook still calls in) never inherits it held by a thread it does not have.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>

#include "replayer/ReplaySession.h"
#include "support/SampleTrace.h"
#include "support/UnderTsan.h"

namespace dlrr {
namespace {

TEST(ReplaySessionFork, AChildNeverInheritsTheSessionLockHeld) {
#ifdef DLRR_UNDER_TSAN
  GTEST_SKIP() << "ThreadSanitizer does not follow a fork of a multi-threaded process";
#endif
  std::string root = testing::makeTempDir("replayfork");
  testing::writeSampleTrace(root + "/t");
  Config c;
  c.mode = Mode::Replay;
  c.traceDir = root + "/t";
  ReplaySession r(c, "end");
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    while (!stop.load()) (void)r.recordedLoss(0);  // takes the session's lock
  });
  for (int i = 0; i < 200; ++i) {
    r.beforeFork();
    pid_t pid = ::fork();
    if (pid == 0) {
      r.afterForkChild();
      ::alarm(10);  // a lock inherited held would block here for ever: SIGALRM ends the child
      (void)r.recordedLoss(0);
      ::_exit(0);
    }
    r.afterForkParent();
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "child " << i << " did not finish (" << (WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "exit")
        << "): it inherited the session's lock held by the busy thread";
  }
  stop.store(true);
  busy.join();
  testing::removeTree(root);
}

}  // namespace
}  // namespace dlrr
