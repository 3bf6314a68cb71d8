// tools/common/ChildProcess: the launcher of dlrecord, dlreplay and dlpreflight, on real
// processes and real signals.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <thread>

#include "tools/common/ChildProcess.h"

namespace dlrr::tools {
namespace {

TEST(ChildProcess, ExitStatusDirectoryAndExecErrors) {
  LaunchSpec spec;
  spec.argv = {"sh", "-c", "test \"$(pwd)\" = / && test \"$DLRR_TEST_X\" = yes && exit 7"};
  spec.env = environmentWith({{"DLRR_TEST_X", "yes"}});
  spec.cwd = "/";
  ChildResult r = launch(spec);
  EXPECT_EQ(r.execError, 0);
  EXPECT_EQ(shellExitCode(r.waitStatus), 7);
  EXPECT_GT(r.pid, 0);

  spec.argv = {"/nonexistent/dlrr-test-program"};
  EXPECT_EQ(launch(spec).execError, ENOENT);
  spec.argv = {"/"};  // a directory: found, not executable
  EXPECT_EQ(launch(spec).execError, EACCES);
  spec.argv = {"true"};
  spec.cwd = "/nonexistent-dlrr-dir";
  EXPECT_EQ(launch(spec).execError, ENOENT);  // the directory, reported like a failed exec
}

TEST(ChildProcess, ASignalSentToTheParentIsPassedOnAndTheFdIsInherited) {
  int ready[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  LaunchSpec spec;
  // The child says it is ready on the inherited descriptor, then waits for SIGUSR1.
  spec.argv = {"sh", "-c",
               "trap 'exit 42' USR1; echo ready >&" + std::to_string(ready[1]) + "; while :; do sleep 0.02; done"};
  spec.env = environmentWith({});
  spec.inheritFds = {ready[1]};
  std::thread sender([&] {
    sigset_t all;
    sigfillset(&all);
    ::pthread_sigmask(SIG_BLOCK, &all, nullptr);  // the signal is for the waiting thread
    char c;
    if (::read(ready[0], &c, 1) == 1) ::kill(::getpid(), SIGUSR1);  // like `kill -USR1 <dlrecord>`
  });
  ChildResult r = launch(spec);
  ::close(ready[1]);  // unblocks the sender if the child never wrote
  sender.join();
  ::close(ready[0]);
  EXPECT_EQ(r.execError, 0);
  ASSERT_TRUE(WIFEXITED(r.waitStatus)) << r.waitStatus;
  EXPECT_EQ(WEXITSTATUS(r.waitStatus), 42);
}

TEST(ChildProcess, ADeathBySignalIsAShellExitCode) {
  ChildResult r = runChild({"sh", "-c", "kill -TERM $$"}, {});
  EXPECT_EQ(shellExitCode(r.waitStatus), 128 + SIGTERM);
}

}  // namespace
}  // namespace dlrr::tools
