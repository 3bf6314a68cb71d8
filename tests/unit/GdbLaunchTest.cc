// dlreplay --debug gdb: gdb's command line, and the job's status read back from what gdb wrote.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdint>
#include <fstream>

#include "support/SampleTrace.h"
#include "tools/dlreplay/GdbLaunch.h"

namespace dlrr {
namespace {

TEST(GdbLaunch, RunsTheCommandUnderGdbAndDumpsTheStatus) {
  auto batch = gdbCommand({"python3", "train.py"}, "/tmp/st", false);
  ASSERT_GE(batch.size(), 4u);
  EXPECT_EQ(batch[0], "gdb");
  EXPECT_NE(std::find(batch.begin(), batch.end(), "-batch"), batch.end());
  EXPECT_NE(std::find(batch.begin(), batch.end(), "break dlrr_replay_stopped"), batch.end());
  EXPECT_NE(std::find(batch.begin(), batch.end(), "dump binary value /tmp/st $dlrr_signal"), batch.end());
  EXPECT_EQ(std::vector<std::string>(batch.end() - 3, batch.end()),
            (std::vector<std::string>{"--args", "python3", "train.py"}));
  auto interactive = gdbCommand({"python3"}, "/tmp/st", true);
  EXPECT_EQ(std::find(interactive.begin(), interactive.end(), "-batch"), interactive.end());
  EXPECT_EQ(std::find(interactive.begin(), interactive.end(), "kill"), interactive.end());  // the user's session
}

class GdbStatusTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::makeTempDir("gdbstatus"); }
  void TearDown() override { testing::removeTree(dir_); }
  std::string write(int32_t signal, int32_t exitCode) {
    std::string p = dir_ + "/status";
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    int32_t v[2] = {signal, exitCode};
    out.write(reinterpret_cast<const char*>(v), sizeof v);
    return p;
  }
  std::string dir_;
};

TEST_F(GdbStatusTest, TheJobsStatusNotGdbs) {
  const int gdbExit0 = W_EXITCODE(0, 0);
  int st = jobStatusUnderGdb(write(SIGSEGV, -1), gdbExit0);  // the job faulted in gdb
  EXPECT_TRUE(WIFSIGNALED(st));
  EXPECT_EQ(WTERMSIG(st), SIGSEGV);
  st = jobStatusUnderGdb(write(0, 3), gdbExit0);  // the job exited 3
  EXPECT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 3);
  st = jobStatusUnderGdb(write(SIGTRAP, -1), W_EXITCODE(1, 0));  // stopped at our breakpoint: gdb's
  EXPECT_EQ(WEXITSTATUS(st), 1);
  EXPECT_EQ(jobStatusUnderGdb(dir_ + "/missing", W_EXITCODE(7, 0)), W_EXITCODE(7, 0));
}

}  // namespace
}  // namespace dlrr
