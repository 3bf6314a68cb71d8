// dlreplay as the launcher of hand-started ranks (tools/dlreplay/RankLaunch): what each rank
// runs with, and which rank's end the verdict names.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tools/dlreplay/RankLaunch.h"

namespace dlrr {
namespace {

ReplaySelection twoRanks() {
  ReplaySelection s;
  for (int r = 0; r < 2; ++r) {
    ReplaySelection::RankLaunch l;
    l.rank = r;
    l.argv = {"python3", "train.py", "--rank-flag"};
    l.cwd = "/work/job" + std::to_string(r);
    l.distEnv = {{"RANK", std::to_string(r)}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "29500"}};
    s.rankLaunches.push_back(l);
    RankStatus st;
    st.rank = r;
    st.exitCode = 0;
    s.ranks.ranks.push_back(st);
  }
  return s;
}

bool has(const std::vector<std::string>& env, const std::string& entry) {
  return std::find(env.begin(), env.end(), entry) != env.end();
}

int exited(int code) { return code << 8; }  // a wait status for exit(code)

TEST(RankLaunch, EachRankRunsAsRecordedMeetingHere) {
  Environment env{{"DLRR_MODE", "replay"}, {"RANK", "0"}, {"USE_LIBUV", "0"}};
  auto specs = rankLaunchSpecs(twoRanks(), env, 41234);
  ASSERT_EQ(specs.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(specs[r].argv, (std::vector<std::string>{"python3", "train.py", "--rank-flag"}));
    EXPECT_EQ(specs[r].cwd, "/work/job" + std::to_string(r));
    EXPECT_TRUE(has(specs[r].env, "RANK=" + std::to_string(r)));  // its own, over the launcher's
    EXPECT_TRUE(has(specs[r].env, "WORLD_SIZE=2"));
    EXPECT_TRUE(has(specs[r].env, "MASTER_ADDR=127.0.0.1"));  // not the recorded host
    EXPECT_TRUE(has(specs[r].env, "MASTER_PORT=41234"));
    EXPECT_TRUE(has(specs[r].env, "DLRR_MODE=replay"));
    EXPECT_TRUE(has(specs[r].env, "USE_LIBUV=0"));
    EXPECT_FALSE(has(specs[r].env, "MASTER_PORT=29500"));
  }
  EXPECT_GT(freeLocalPort(), 0);
}

TEST(RankLaunch, TheEndNamedIsTheRankThatFailedByItself) {
  ReplaySelection s = twoRanks();
  std::vector<tools::ChildResult> c(2);
  ProcessEnd end = rankEnd(s, c);  // both exited 0, as recorded
  EXPECT_EQ(end.who, "the ranks");
  EXPECT_EQ(end.waitStatus, 0);

  c[0].waitStatus = SIGTERM;  // killed by dlreplay after rank 1 failed
  c[0].stoppedForPeer = true;
  c[1].waitStatus = exited(3);
  end = rankEnd(s, c);
  EXPECT_EQ(end.who, "rank 1");
  EXPECT_EQ(end.waitStatus, exited(3));
  EXPECT_EQ(end.recordedExit, 0);

  // Rank 1 failed so in the recording too: its end stops nobody, and the job ended as recorded.
  s.ranks.ranks[1].exitCode = 3;
  EXPECT_TRUE(endsAsRecorded(s, 1, exited(3)));
  EXPECT_FALSE(endsAsRecorded(s, 1, exited(0)));
  EXPECT_FALSE(endsAsRecorded(s, 0, SIGTERM));
  c[0].waitStatus = 0;
  c[0].stoppedForPeer = false;
  EXPECT_EQ(rankEnd(s, c).who, "the ranks");
}

}  // namespace
}  // namespace dlrr
