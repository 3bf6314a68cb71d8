// torch.distributed support below the Python hook: what a rank's environment says
// (DistEnv), collectives recorded by a real RecordSession per rank, the origin of a
// non-finite value across ranks (analyzeRanks), and the replay side (ReplaySession serving
// and checking collectives, picking its rank's stream).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "format/Trace.h"
#include "recorder/RecordSession.h"
#include "replayer/ReplayReport.h"
#include "replayer/ReplaySession.h"
#include "session/DistEnv.h"
#include "support/SampleTrace.h"
#include "triage/Ranks.h"

namespace dlrr {
namespace {

std::map<std::string, std::string> gFakeEnv;
const char* fakeGet(const char* name) {
  auto it = gFakeEnv.find(name);
  return it == gFakeEnv.end() ? nullptr : it->second.c_str();
}

TEST(DistEnv, ReadsWhatTorchrunSets) {
  gFakeEnv = {{"RANK", "3"},
              {"LOCAL_RANK", "1"},
              {"WORLD_SIZE", "8"},
              {"TORCHELASTIC_RESTART_COUNT", "2"},
              {"TORCHELASTIC_RUN_ID", "job7"}};
  DistEnv d = DistEnv::fromEnvironment(fakeGet);
  EXPECT_TRUE(d.isRank());
  EXPECT_EQ(d.rank, 3);
  EXPECT_EQ(d.localRank, 1);
  EXPECT_EQ(d.worldSize, 8);
  EXPECT_EQ(d.restartCount, 2);
  EXPECT_EQ(d.runId, "job7");
  EXPECT_EQ(rankStreamBase(d), "rank3.restart2");
  gFakeEnv["TORCHELASTIC_RESTART_COUNT"] = "0";
  EXPECT_EQ(rankStreamBase(DistEnv::fromEnvironment(fakeGet)), "rank3");
}

TEST(DistEnv, MalformedOrInconsistentIsNotARank) {
  for (const auto& env :
       std::vector<std::map<std::string, std::string>>{{},
                                                       {{"RANK", "0"}},                        // no world size
                                                       {{"RANK", "x"}, {"WORLD_SIZE", "2"}},   // not a number
                                                       {{"RANK", "-1"}, {"WORLD_SIZE", "2"}},  // negative
                                                       {{"RANK", "2"}, {"WORLD_SIZE", "2"}},   // outside the world
                                                       {{"RANK", "1 "}, {"WORLD_SIZE", "2"}},  // trailing junk
                                                       {{"RANK", "99999999999"}, {"WORLD_SIZE", "2"}}}) {
    gFakeEnv = env;
    DistEnv d = DistEnv::fromEnvironment(fakeGet);
    EXPECT_FALSE(d.isRank());
    EXPECT_EQ(rankStreamBase(d), "");
  }
}

TEST(DistEnv, RecordsOnlyLauncherVariables) {
  EXPECT_TRUE(isDistVariable("RANK"));
  EXPECT_TRUE(isDistVariable("MASTER_PORT"));
  EXPECT_TRUE(isDistVariable("TORCHELASTIC_RUN_ID"));
  EXPECT_TRUE(isDistVariable("NCCL_DEBUG"));
  EXPECT_TRUE(isDistVariable("OMP_NUM_THREADS"));
  EXPECT_FALSE(isDistVariable("HOME"));
  EXPECT_FALSE(isDistVariable("RANKING"));
  ::setenv("NCCL_IB_AUTH_TOKEN", "hunter2", 1);  // secret-looking: never recorded as it is
  ::setenv("GLOO_SOCKET_IFNAME", "lo", 1);
  DistEnv d = DistEnv::fromEnvironment();
  std::map<std::string, std::string> vars(d.vars.begin(), d.vars.end());
  EXPECT_EQ(vars["NCCL_IB_AUTH_TOKEN"], "<redacted>");
  EXPECT_EQ(vars["GLOO_SOCKET_IFNAME"], "lo");
  ::unsetenv("NCCL_IB_AUTH_TOKEN");
  ::unsetenv("GLOO_SOCKET_IFNAME");
}

// ---------------------------------------------------------------- record and analyse
struct RankEnv {
  explicit RankEnv(int rank, int world = 2) {
    ::setenv("RANK", std::to_string(rank).c_str(), 1);
    ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
    ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
  }
  ~RankEnv() {
    ::unsetenv("RANK");
    ::unsetenv("LOCAL_RANK");
    ::unsetenv("WORLD_SIZE");
  }
};

Config recordConfig(const std::string& dir, bool keep) {
  Config c;
  c.mode = Mode::Record;
  c.traceDir = dir;
  c.keepCollectives = keep;
  return c;
}

const int64_t kShape[] = {4};

void bucket(RecordSession& s, const std::vector<float>& sent, const std::vector<float>& got) {
  uint64_t seq = s.collectiveBegin("ddp_bucket", "world", "sum", -1, 0, true);
  s.collectiveTensor(seq, false, "float32", 1, kShape, sent.data(), sent.size() * 4);
  s.collectiveTensor(seq, true, "float32", 1, kShape, got.data(), got.size() * 4);
  s.collectiveEnd(seq, "");
}

void digest(RecordSession& s, int kind, const char* path, const std::vector<float>& v) {
  DigestResult r;
  s.digest(kind, path, 0, 0, "float32", 1, kShape, v.data(), v.size() * 4, false, r);
}

// Two ranks of a DDP job: rank 1's fc2 output goes NaN at step 1; the all-reduce of that
// step carries it to rank 0, whose gradient is then the first non-finite value it sees.
std::string recordTwoRanks(bool keep) {
  std::string dir = testing::makeTempDir("dist") + "/t";
  const float nan = std::nanf("");
  std::vector<float> ok{1, 2, 3, 4}, sum{2, 4, 6, 8}, bad{nan, 1, 1, 1}, badSum{nan, 3, 4, 5};
  for (int rank : {0, 1}) {
    RankEnv env(rank);
    RecordSession s(recordConfig(dir, keep));
    uint64_t init = s.collectiveBegin("ddp_init_sync", "world", "", -1, -1, false);
    s.collectiveTensor(init, true, "float32", 1, kShape, ok.data(), 16);
    s.collectiveEnd(init, "");
    for (int step = 0; step < 3; ++step) {
      s.stepBegin(step, 0, static_cast<uint64_t>(step), 0);
      bool failing = step >= 1;
      digest(s, 0, "fc2", rank == 1 && failing ? bad : ok);
      bucket(s, rank == 1 && failing ? bad : ok, failing ? badSum : sum);
      digest(s, 1, "fc2.weight", failing ? badSum : sum);
      s.stepEnd(step, 0.5);
    }
    s.onExit(true, 0);
  }
  return dir;
}

TEST(Distributed, EachRankHasItsOwnStreamTaggedWithItsPlace) {
  std::string dir = recordTwoRanks(false);
  auto t = Trace::open(dir);
  ASSERT_NE(t->find("rank0"), nullptr);
  ASSERT_NE(t->find("rank1"), nullptr);
  auto h = t->find("rank1")->header();
  EXPECT_EQ(h.getRank(), 1);
  EXPECT_EQ(h.getWorldSize(), 2);
  EXPECT_EQ(h.getLocalRank(), 1);
  EXPECT_GT(h.getHost().size(), 0u);
  bool sawRank = false;
  for (auto kv : h.getDistEnv())
    sawRank = sawRank || (std::string(kv.getKey().cStr()) == "RANK" && std::string(kv.getValue().cStr()) == "1");
  EXPECT_TRUE(sawRank);
  EXPECT_EQ(t->findRank(1), t->find("rank1"));
  EXPECT_EQ(t->findRank(2), nullptr);
  testing::removeTree(dir.substr(0, dir.size() - 2));
}

TEST(Distributed, TheOriginOfANonFiniteValueIsTheRankThatMadeIt) {
  std::string dir = recordTwoRanks(false);
  auto t = Trace::open(dir);
  RankReport rep = analyzeRanks(*t);
  ASSERT_EQ(rep.ranks.size(), 2u);
  EXPECT_EQ(rep.worldSize, 2);
  EXPECT_EQ(rep.ranks[0].collectives, 4u);  // init + 3 buckets
  EXPECT_EQ(rep.ranks[0].keptResults, 0u);  // digests only
  EXPECT_TRUE(rep.ranks[0].failureReceived);
  EXPECT_EQ(rep.ranks[0].receivedOp, "ddp_bucket");
  EXPECT_FALSE(rep.ranks[1].failureReceived);
  ASSERT_TRUE(rep.origin);
  EXPECT_EQ(rep.origin->rank, 1);
  EXPECT_EQ(rep.origin->failure.step, 1);
  EXPECT_EQ(rep.origin->failure.where, "fc2");
  EXPECT_EQ(rep.origin->reached, std::vector<int>{0});
  EXPECT_EQ(formatOrigin(*rep.origin).rfind("rank 1, step 1, fc2 (", 0), 0u) << formatOrigin(*rep.origin);
  EXPECT_NE(formatOrigin(*rep.origin).find("; reached rank 0 through DDP all-reduce at step 1"), std::string::npos);
  testing::removeTree(dir.substr(0, dir.size() - 2));
}

TEST(Distributed, NotADistributedTraceHasNoRanks) {
  std::string dir = testing::makeTempDir("dist") + "/t";
  {
    RecordSession s(recordConfig(dir, false));
    s.stepBegin(0, 0, 0, 0);
    s.stepEnd(0, 1.0);
    s.onExit(true, 0);
  }
  auto t = Trace::open(dir);
  EXPECT_FALSE(analyzeRanks(*t).distributed());
  EXPECT_EQ(t->findRank(0), nullptr);
  testing::removeTree(dir.substr(0, dir.size() - 2));
}

// ---------------------------------------------------------------- replay
Config replayConfig(const std::string& dir, const std::string& stream) {
  Config c;
  c.mode = Mode::Replay;
  c.traceDir = dir;
  c.replayStream = stream;
  return c;
}

// The hook's calls that both sides make go through one ProcessSession (interpose/CApi.cc):
// recording writes them, replay checks the same calls against what was written.
TEST(Distributed, RecordAndReplayAnswerTheSameCallsAsProcessSessions) {
  std::string dir = testing::makeTempDir("session") + "/t";
  const std::vector<float> ok{1, 2, 3, 4}, other{1, 2, 3, 5};
  // Returns the digest's, the collective's number and the collective tensor's answers.
  auto step0 = [](ProcessSession& s, const std::vector<float>& v) {
    s.stepBegin(0, 0, 0, 0, StepRule::Batch);
    DigestResult d;
    int digestRc = s.digest(0, "fc2", 0, 0, "float32", 1, kShape, v.data(), 16, false, d);
    EXPECT_EQ(d.hash, computeDigest("float32", v.data(), 16).hash);
    uint64_t seq = s.collectiveBegin("all_reduce", "world", "sum", -1, -1, false);
    int tensorRc = s.collectiveTensor(seq, false, "float32", 1, kShape, v.data(), 16);
    return std::vector<int64_t>{digestRc, static_cast<int64_t>(seq), tensorRc};
  };
  {
    RankEnv env(0);
    RecordSession rec(recordConfig(dir, false));
    ProcessSession& s = rec;
    EXPECT_EQ(s.mode(), Mode::Record);
    EXPECT_EQ(s.captureLevel(), static_cast<int>(CaptureLevel::Default));
    EXPECT_EQ(step0(s, ok), (std::vector<int64_t>{0, 0, 0}));
    EXPECT_EQ(s.currentStep(), 0);
    rec.collectiveEnd(0, "");
    s.stepEnd(0, 0.5);
    rec.onExit(true, 0);
  }
  for (const auto* v : {&ok, &other}) {
    ReplaySession rep(replayConfig(dir, "rank0"), "end");
    ASSERT_TRUE(rep.active());
    ProcessSession& s = rep;
    EXPECT_EQ(s.mode(), Mode::Replay);
    int64_t want = v == &ok ? 0 : 1;  // 1: differs from the recording
    EXPECT_EQ(step0(s, *v), (std::vector<int64_t>{want, 0, want}));
    EXPECT_EQ(s.currentStep(), 0);
    s.stepEnd(0, 0.5);
    EXPECT_EQ(rep.divergence().has_value(), v != &ok);
  }
}

constexpr int64_t kFour[] = {4};

TEST(Distributed, ReplayServesKeptResultsAndChecksWhatTheRankSends) {
  std::string dir = recordTwoRanks(true);
  {
    ReplaySession rep(replayConfig(dir, "rank0"), "end");
    ASSERT_TRUE(rep.active());
    EXPECT_EQ(rep.recordedRank(), 0);
    uint64_t init = rep.collectiveBegin("ddp_init_sync", "", "", -1, -1, false);
    EXPECT_EQ(init, 0u);
    std::vector<uint8_t> bytes;
    ASSERT_EQ(rep.collectiveResult(init, 0, bytes), 1);
    ASSERT_EQ(bytes.size(), 16u);
    float v[4];
    std::memcpy(v, bytes.data(), 16);
    EXPECT_EQ(v[3], 4.0f);
    EXPECT_EQ(rep.collectiveResult(init, 1, bytes), -1);  // no second result
    rep.stepBegin(0, 0, 0, 0, StepRule::Batch);
    uint64_t b = rep.collectiveBegin("ddp_bucket", "", "", -1, -1, false);
    std::vector<float> ok{1, 2, 3, 4};
    EXPECT_EQ(rep.collectiveTensor(b, false, "float32", 1, kFour, ok.data(), 16), 0);
    ASSERT_EQ(rep.collectiveResult(b, 0, bytes), 1);
    std::memcpy(v, bytes.data(), 16);
    EXPECT_EQ(v[0], 2.0f);
    EXPECT_FALSE(rep.divergence());
    // Step 1: this rank sends something else than it did: a divergence naming the collective.
    rep.stepBegin(1, 0, 1, 0, StepRule::Batch);
    uint64_t b1 = rep.collectiveBegin("ddp_bucket", "", "", -1, -1, false);
    std::vector<float> other{1, 2, 3, 5};
    EXPECT_EQ(rep.collectiveTensor(b1, false, "float32", 1, kFour, other.data(), 16), 1);
    ASSERT_TRUE(rep.divergence());
    EXPECT_EQ(rep.divergence()->step, 1);
    EXPECT_NE(rep.divergence()->detail.find(
                  "collective #2 ddp_bucket bucket 0 (step 1): input 0 (what this rank sent) differs"),
              std::string::npos)
        << rep.divergence()->detail;
    ASSERT_EQ(rep.collectiveResult(b1, 0, bytes), 1);  // the recorded result, NaN and all
    std::memcpy(v, bytes.data(), 16);
    EXPECT_TRUE(std::isnan(v[0]));
  }
  {
    // The op itself differing is a divergence too.
    ReplaySession rep(replayConfig(dir, "rank1"), "end");
    EXPECT_EQ(rep.collectiveBegin("all_reduce", "", "", -1, -1, false), 0u);
    ASSERT_TRUE(rep.divergence());
    EXPECT_NE(rep.divergence()->detail.find("the recording issued ddp_init_sync"), std::string::npos);
  }
  testing::removeTree(dir.substr(0, dir.size() - 2));
}

TEST(Distributed, DigestOnlyRecordingsCannotServeResults) {
  std::string dir = recordTwoRanks(false);
  ReplaySession rep(replayConfig(dir, "rank1"), "end");
  uint64_t init = rep.collectiveBegin("ddp_init_sync", "", "", -1, -1, false);
  std::vector<uint8_t> bytes;
  EXPECT_EQ(rep.collectiveResult(init, 0, bytes), 0);
  std::vector<float> ok{1, 2, 3, 4};
  EXPECT_EQ(rep.collectiveTensor(init, true, "float32", 1, kFour, ok.data(), 16), 0);  // received: checked
  testing::removeTree(dir.substr(0, dir.size() - 2));
}

TEST(Distributed, EachRankReplaysItsOwnStreamUnderAllRanks) {
  std::string dir = recordTwoRanks(false);
  std::string report = dir + "/../report";
  ::close(::open((report + ".rank1").c_str(), O_CREAT | O_WRONLY, 0600));
  ::setenv("DLRR_REPORT", report.c_str(), 1);
  {
    RankEnv env(1);
    ReplaySession rep(replayConfig(dir, kEachRank), "end");
    ASSERT_TRUE(rep.active());
    EXPECT_EQ(rep.recordedRank(), 1);
    rep.collectiveBegin("ddp_init_sync", "", "", -1, -1, false);
    rep.writeReport("exit");
  }
  ReplayReport r = readReplayReportFile(report + ".rank1");
  ASSERT_TRUE(r.dist);
  EXPECT_EQ(r.dist->rank, 1);
  EXPECT_EQ(r.dist->issued, 1u);
  EXPECT_EQ(r.dist->recorded, 4u);
  {
    // The launcher agent (no RANK) replays nothing and writes no report.
    ReplaySession rep(replayConfig(dir, kEachRank), "end");
    EXPECT_FALSE(rep.active());
  }
  ::unsetenv("DLRR_REPORT");
  testing::removeTree(dir.substr(0, dir.size() - 2));
}

}  // namespace
}  // namespace dlrr
