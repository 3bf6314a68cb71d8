// What ran beside a recorded process (format/Concurrency): trainers that raced, processes the
// job created that dlrr did not record, and the Fork events the recorder writes for them.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "format/Trace.h"
#include "recorder/RecordSession.h"
#include "support/SampleTrace.h"
#include "support/UnderTsan.h"
#include "triage/Concurrency.h"

namespace dlrr {
namespace {

Config recordConfig(const std::string& dir) {
  Config c;
  c.mode = Mode::Record;
  c.traceDir = dir;
  return c;
}

void trainSteps(RecordSession& s, int n) {
  for (int step = 0; step < n; ++step) {
    s.stepBegin(step, 0, static_cast<uint64_t>(step), 0);
    s.stepEnd(step, 0.25);
  }
}

// A parent that trains 2 steps and forks a child that trains 3 in its own stream (what the
// Python hook's naming makes of an os.fork() trainer: DLRR_PROCESS_ID set around the fork).
std::string recordParentAndForkedTrainer(const char* childIdentity, bool childTrains) {
  std::string dir = testing::makeTempDir("conc") + "/t";
  RecordSession s(recordConfig(dir));
  trainSteps(s, 2);
  ::setenv(kProcessIdEnv, childIdentity, 1);
  s.beforeFork();
  pid_t pid = ::fork();
  if (pid == 0) {
    s.afterForkChild();
    if (childTrains) trainSteps(s, 3);
    s.onExit(true, 0);
    ::_exit(0);
  }
  s.afterForkParent();
  s.forked(pid);
  ::unsetenv(kProcessIdEnv);
  int status = 0;
  ::waitpid(pid, &status, 0);
  s.onExit(true, 0);
  return dir;
}

std::vector<schema::Fork::Kind> forkKinds(Trace& t, std::string& childStream, std::string& identity) {
  std::vector<schema::Fork::Kind> kinds;
  for (auto& s : t.streams())
    s->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
      if (!e.isFork()) return;
      kinds.push_back(e.getFork().getKind());
      childStream = e.getFork().getChildStream().cStr();
      identity = e.getFork().getChildIdentity().cStr();
    });
  return kinds;
}

TEST(Concurrency, AForkedTrainerIsItsOwnStreamAndTheParentSaysSo) {
#ifdef DLRR_UNDER_TSAN
  // The forked trainer starts its own writer thread, as a recorded child does; ThreadSanitizer
  // cannot follow a fork of a multi-threaded process into one that starts threads.
  GTEST_SKIP() << "ThreadSanitizer: no new threads after a multi-threaded fork";
#endif
  std::string dir = recordParentAndForkedTrainer("fork1", true);
  auto t = Trace::open(dir);
  std::string childStream, identity;
  auto kinds = forkKinds(*t, childStream, identity);
  ASSERT_EQ(kinds.size(), 1u);
  EXPECT_EQ(kinds[0], schema::Fork::Kind::RECORDED);
  EXPECT_EQ(identity, "fork1");
  StreamReader* child = t->find(childStream);
  ASSERT_NE(child, nullptr) << childStream;
  EXPECT_EQ(std::string(child->header().getProcessIdentity().cStr()), "fork1");
  Concurrency c = analyzeConcurrency(*t);
  EXPECT_EQ(c.trainers.size(), 2u);
  EXPECT_TRUE(c.unrecorded.empty());
  EXPECT_EQ(c.caveat().rfind("determinism cannot be claimed: 2 processes trained at once without torch.distributed", 0),
            0u)
      << c.caveat();
  EXPECT_NE(c.caveat().find("a replay of one of them can verify bit-exact while the recording raced"),
            std::string::npos);
  testing::removeTree(dir.substr(0, dir.size() - 2));
}

TEST(Concurrency, ADataLoaderWorkerIsNotRecordedAndRaisesNoCaveat) {
  std::string dir = recordParentAndForkedTrainer("dataloader-worker:1", true);
  auto t = Trace::open(dir);
  std::string childStream, identity;
  auto kinds = forkKinds(*t, childStream, identity);
  ASSERT_EQ(kinds.size(), 1u);
  EXPECT_EQ(kinds[0], schema::Fork::Kind::LOADER_WORKER);
  EXPECT_EQ(childStream, "");
  size_t processes = 0;
  for (auto& s : t->streams()) processes += s->header().getRole() == schema::StreamHeader::Role::PROCESS;
  EXPECT_EQ(processes, 1u);  // the worker wrote nothing
  Concurrency c = analyzeConcurrency(*t);
  EXPECT_EQ(c.trainers.size(), 1u);
  EXPECT_EQ(c.caveat(), "");
  testing::removeTree(dir.substr(0, dir.size() - 2));
}

TEST(Concurrency, CaveatNamesUnrecordedProcesses) {
  Concurrency c;
  c.trainers = {"p10"};
  EXPECT_EQ(c.caveat(), "");  // one trainer, nothing unrecorded: nothing to say
  c.unrecorded = {{42, "p10", "forked by native code, not through Python's os.fork"}};
  EXPECT_EQ(c.caveat(),
            "determinism cannot be claimed: 1 process of the job ran unrecorded (pid 42 forked by native code, not "
            "through Python's os.fork in p10): what it did is not in the trace");
  c.trainers.push_back("p11");  // each said it updated no shared parameter: they cannot race
  EXPECT_EQ(c.caveat().find("trained at once"), std::string::npos) << c.caveat();
  c.unknownSharing = {"p11"};  // one did not say (an older trace)
  EXPECT_NE(c.caveat().find("2 processes trained at once without torch.distributed (p10, p11): if they share a model"),
            std::string::npos)
      << c.caveat();
  c.sharing = {"p10", "p11"};
  c.unknownSharing.clear();
  EXPECT_NE(c.caveat().find("2 processes trained at once without torch.distributed (p10, p11), 2 of them updating "
                            "parameters in shared memory (Hogwild, model.share_memory()): their updates race"),
            std::string::npos)
      << c.caveat();
  EXPECT_NE(c.caveat().find("; and 1 process of the job ran unrecorded"), std::string::npos);
}

}  // namespace
}  // namespace dlrr
