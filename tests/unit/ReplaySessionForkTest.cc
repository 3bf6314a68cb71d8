// fork() while another thread is inside the replay session: the prepare handler (beforeFork)
// holds every lock of the session and its parts (ReplaySession.h's lock order) across fork(),
// so a child (a forked trainer taking the stream over, a worker whose hook still calls in)
// never inherits one held by a thread it does not have.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "recorder/RecordSession.h"
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
  Config c;
  c.traceDir = root + "/t";
  {
    c.mode = Mode::Record;
    RecordSession rec(c);  // this process's command line: the replay below attaches
    rec.stepBegin(0, 0, 0, 0);
    rec.stepEnd(0, 1.0);
    rec.onExit(true, 0);
  }
  c.mode = Mode::Replay;
  std::string report = root + "/report";
  testing::writeFile(report, {});
  ::setenv("DLRR_REPORT", report.c_str(), 1);
  ReplaySession r(c, "end");
  ASSERT_TRUE(r.active());
  // One busy thread per lock, each in and out of it all the time: the report's (and the
  // session's), the verifier's, the report writer's, the index's.
  std::vector<std::function<void()>> calls = {
      [&r] { r.writeReport("running"); },
      [&r] { (void)r.divergence(); },
      [&r] { r.fact("exception", "x"); },
      [&r] {
        std::vector<uint8_t> kept;
        r.recordedTensors(0, kept);
      },
  };
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  busy.reserve(calls.size());
  for (const auto& call : calls)
    busy.emplace_back([&stop, &call] {
      while (!stop.load()) {
        call();
        std::this_thread::yield();  // lets the prepare handler in: std::mutex is not fair
      }
    });
  for (int i = 0; i < 50; ++i) {
    r.beforeFork();
    pid_t pid = ::fork();
    if (pid == 0) {
      r.afterForkChild();
      ::alarm(10);  // a lock inherited held would block here for ever: SIGALRM ends the child
      for (const auto& call : calls) call();
      ::_exit(0);
    }
    r.afterForkParent();
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "child " << i << " did not finish (" << (WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "exit")
        << "): it inherited a lock of the session held by the busy thread";
  }
  stop.store(true);
  for (auto& t : busy) t.join();
  ::unsetenv("DLRR_REPORT");
  testing::removeTree(root);
}

}  // namespace
}  // namespace dlrr
