// dlrecord's status pipe: lines a (real, forked) job writes, read back after it ends.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "tools/dlrecord/StatusPipe.h"

namespace dlrr {
namespace {

TEST(StatusPipe, LinesTheChildWroteWithoutEmptyOnes) {
  StatusPipe p;
  ASSERT_TRUE(p.valid());
  std::string ev = p.environmentValue();
  struct stat st {};
  ASSERT_EQ(::fstat(p.childFd(), &st), 0);
  EXPECT_EQ(ev, std::to_string(p.childFd()) + ":" + std::to_string(st.st_ino));
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const char msg[] = "pid 1: recording stopped: disk full\n\npid 1: no steps";  // last line unterminated
    ssize_t n = ::write(p.childFd(), msg, sizeof msg - 1);
    ::_exit(n == static_cast<ssize_t>(sizeof msg - 1) ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  p.closeWriteEnd();
  EXPECT_FALSE(p.valid());
  EXPECT_EQ(p.environmentValue(), "");
  EXPECT_EQ(p.readLines(), (std::vector<std::string>{"pid 1: recording stopped: disk full", "pid 1: no steps"}));
  EXPECT_TRUE(p.readLines().empty());  // read once
}

}  // namespace
}  // namespace dlrr
