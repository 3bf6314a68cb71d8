// fork() while another thread is inside the recorder: the prepare handler (beforeFork) takes
// every lock of the session in its documented order, so a child never inherits one held by a
// thread it does not have (a DataLoader worker whose hook still calls in, a forked trainer).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <string>
#include <thread>

#include "recorder/RecordSession.h"
#include "support/SampleTrace.h"
#include "support/UnderTsan.h"

namespace dlrr {
namespace {

void useEveryLeafLock(RecordSession& s) {
  uint64_t seq = s.collectiveBegin("all_reduce", "world", "sum", -1, -1, false);
  s.collectiveEnd(seq, "ok");
  s.gpuMemory(0, 1, 2, 3);
  s.note("fork test");
  s.failedLookup(AT_FDCWD, "/nonexistent/fork-test", ENOENT, LookupOp::Stat);  // triage_'s lock
  s.libraryLoadError("libfork-test.so", "not found");
}

void useTriageLock(RecordSession& s) { s.failedLookup(AT_FDCWD, "/nonexistent/fork-test", ENOENT, LookupOp::Stat); }

// Forks `forks` times while another thread keeps calling `busyFn`; each child uses every lock.
// childId: the identity the hook gives a forked trainer (it records on), or nullptr.
void forkWhileBusy(void (*busyFn)(RecordSession&), int forks, const char* childId = nullptr) {
  std::string root = testing::makeTempDir("fork");
  Config c;
  c.mode = Mode::Record;
  c.traceDir = root + "/t";
  RecordSession s(c);
  if (childId) ::setenv(kProcessIdEnv, childId, 1);  // after the parent took its own identity
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    while (!stop.load()) busyFn(s);
  });
  for (int i = 0; i < forks; ++i) {
    s.beforeFork();
    pid_t pid = ::fork();
    if (pid == 0) {
      s.afterForkChild();
      ::alarm(10);  // a lock inherited held would block here for ever: SIGALRM ends the child
      useEveryLeafLock(s);
      ::_exit(0);
    }
    s.afterForkParent();
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "child " << i << " did not finish (" << (WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "exit")
        << "): it inherited a lock held by the busy thread";
  }
  stop.store(true);
  busy.join();
  s.onExit(true, 0);
  testing::removeTree(root);
}

TEST(RecordSessionFork, AChildNeverInheritsALockHeldByAnotherThread) {
#ifdef DLRR_UNDER_TSAN
  GTEST_SKIP() << "ThreadSanitizer does not follow a fork of a multi-threaded process";
#endif
  forkWhileBusy(useEveryLeafLock, 60);
}

// A forked trainer (a multiprocessing.Process the hook named) records on: its triage facts
// take the triage log's lock, which the prepare handler must have held across fork().
TEST(RecordSessionFork, ARecordingChildNeverInheritsATriageLockHeld) {
#ifdef DLRR_UNDER_TSAN
  GTEST_SKIP() << "ThreadSanitizer does not follow a fork of a multi-threaded process";
#endif
  forkWhileBusy(useTriageLock, 200, "fork-test-trainer");
  ::unsetenv(kProcessIdEnv);
}

}  // namespace
}  // namespace dlrr
