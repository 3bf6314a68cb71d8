// tools/common/ChildProcess: the launcher of dlrecord, dlreplay and dlpreflight, on real
// processes and real signals.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

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

TEST(ChildProcess, SeveralChildrenRunTogetherAndAreAllWaitedFor) {
  // Each child waits for the other's file: they can only finish if they run at the same time.
  char dir[] = "/tmp/dlrr-launchall-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  std::string d = dir;
  std::vector<LaunchSpec> specs(2);
  for (int i = 0; i < 2; ++i) {
    specs[i].argv = {"sh", "-c",
                     "touch " + d + "/" + std::to_string(i) + "; n=0; while [ ! -e " + d + "/" + std::to_string(1 - i) +
                         " ]; do n=$((n+1)); [ $n -gt 500 ] && exit 9; sleep 0.01; done; exit " +
                         std::to_string(3 + i)};
    specs[i].env = environmentWith({});
  }
  std::vector<ChildResult> r = launchAll(specs);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(shellExitCode(r[0].waitStatus), 3);
  EXPECT_EQ(shellExitCode(r[1].waitStatus), 4);
  EXPECT_NE(r[0].pid, r[1].pid);
  std::filesystem::remove_all(d);
}

TEST(ChildProcess, ASignalSentToTheParentReachesEveryChild) {
  // `kill <dlreplay>` during --all-ranks must reach every rank, not the first one only.
  int ready[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  std::vector<LaunchSpec> specs(2);
  for (int i = 0; i < 2; ++i) {
    specs[i].argv = {"sh", "-c",
                     "trap 'exit " + std::to_string(40 + i) + "' USR1; echo r >&" + std::to_string(ready[1]) +
                         "; while :; do sleep 0.02; done"};
    specs[i].env = environmentWith({});
    specs[i].inheritFds = {ready[1]};
  }
  std::thread sender([&] {
    sigset_t all;
    sigfillset(&all);
    ::pthread_sigmask(SIG_BLOCK, &all, nullptr);
    char c[4];
    size_t got = 0;
    while (got < 4) {  // "r\n" from each child
      ssize_t n = ::read(ready[0], c, sizeof c - got);
      if (n <= 0) return;
      got += static_cast<size_t>(n);
    }
    ::kill(::getpid(), SIGUSR1);
  });
  std::vector<ChildResult> r = launchAll(specs);
  ::close(ready[1]);
  sender.join();
  ::close(ready[0]);
  EXPECT_EQ(shellExitCode(r[0].waitStatus), 40);
  EXPECT_EQ(shellExitCode(r[1].waitStatus), 41);
  EXPECT_FALSE(r[0].stoppedForPeer || r[1].stoppedForPeer);
}

TEST(ChildProcess, OneFailingStopsItsPeersWhenAsked) {
  std::vector<LaunchSpec> specs(2);
  specs[0].argv = {"sh", "-c", "sleep 0.1; exit 3"};
  specs[1].argv = {"sh", "-c", "trap 'exit 42' TERM; while :; do sleep 0.02; done"};  // waits for a peer forever
  for (auto& s : specs) s.env = environmentWith({});
  auto failed = [](size_t, int status) { return shellExitCode(status) != 0; };
  std::vector<ChildResult> r = launchAll(specs, failed);
  EXPECT_EQ(shellExitCode(r[0].waitStatus), 3);
  EXPECT_EQ(shellExitCode(r[1].waitStatus), 42);
  EXPECT_FALSE(r[0].stoppedForPeer);
  EXPECT_TRUE(r[1].stoppedForPeer);
  // Not asked: a failure leaves the others alone.
  specs[1].argv = {"sh", "-c", "sleep 0.3; exit 5"};
  r = launchAll(specs);
  EXPECT_EQ(shellExitCode(r[1].waitStatus), 5);
  specs[0].argv = {"/nonexistent/dlrr-test-program"};
  r = launchAll(specs, failed);
  EXPECT_EQ(r[0].execError, ENOENT);
  EXPECT_EQ(shellExitCode(r[1].waitStatus), 128 + SIGTERM);  // no trap: the TERM ends it
}

}  // namespace
}  // namespace dlrr::tools
