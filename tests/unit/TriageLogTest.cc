// TriageLog (failed lookups and library loads, aggregated per path) and the resource parsers.
#include <gtest/gtest.h>

#include <cerrno>
#include <thread>

#include "recorder/ResourceUsage.h"
#include "recorder/TriageLog.h"

namespace dlrr {
namespace {

TEST(TriageLog, AggregatesPerPathOpAndErrno) {
  TriageLog log;
  EXPECT_TRUE(log.failedLookup("/mnt/data/val.json", ENOENT, LookupOp::Stat, 10, -1));
  EXPECT_TRUE(log.failedLookup("/mnt/data/val.json", ENOENT, LookupOp::Open, 20, -1));
  EXPECT_TRUE(log.failedLookup("/mnt/data/val.json", ENOENT, LookupOp::Open, 30, 3));
  auto p = log.paths();
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[1].count, 2u);
  EXPECT_EQ(p[1].firstNs, 20);  // the first failure's time and step stay
  EXPECT_EQ(p[1].firstStep, -1);
}

TEST(TriageLog, IgnoresNormalErrorsAndImportProbes) {
  TriageLog log;
  EXPECT_FALSE(log.failedLookup("/tmp/lock", EEXIST, LookupOp::Create, 1, -1));
  EXPECT_FALSE(log.failedLookup("/tmp/x", EAGAIN, LookupOp::Open, 1, -1));
  EXPECT_FALSE(log.failedLookup("/usr/lib/python3/dist-packages/torch/__init__.cpython-311-x86_64-linux-gnu.so", ENOENT,
                                LookupOp::Stat, 1, -1));
  EXPECT_FALSE(log.failedLookup("/job/__pycache__/m.cpython-311.pyc", ENOENT, LookupOp::Open, 1, -1));
  EXPECT_FALSE(log.failedLookup("/full/disk", ENOSPC, LookupOp::Stat, 1, -1));  // stat cannot mean a full disk
  EXPECT_TRUE(log.failedLookup("/full/disk", ENOSPC, LookupOp::Create, 1, -1));
  EXPECT_TRUE(log.failedLookup("/root/secret", EACCES, LookupOp::Open, 1, -1));
  EXPECT_TRUE(log.failedLookup("/ro/out", EROFS, LookupOp::Mkdir, 1, -1));
  EXPECT_EQ(log.paths().size(), 3u);
  EXPECT_TRUE(TriageLog::isImportProbe("/a/b/__init__.abi3.so"));
  EXPECT_FALSE(TriageLog::isImportProbe("/a/b/__init__.py"));
}

TEST(TriageLog, CapsDistinctPathsAndCountsTheRest) {
  TriageLog log(3, 2);
  for (int i = 0; i < 5; ++i) log.failedLookup("/p/" + std::to_string(i), ENOENT, LookupOp::Open, i, -1);
  log.failedLookup("/p/4", ENOENT, LookupOp::Open, 9, -1);  // a dropped path again
  log.failedLookup("/p/0", ENOENT, LookupOp::Open, 9, -1);  // a kept one: still counted
  EXPECT_EQ(log.paths().size(), 3u);
  EXPECT_EQ(log.paths()[0].count, 2u);
  auto c = log.takeChanges();
  EXPECT_EQ(c.droppedPaths, 2u);
  EXPECT_EQ(c.droppedFailures, 3u);
  std::string longPath(5000, 'x');
  TriageLog big;
  big.failedLookup("/" + longPath, ENOENT, LookupOp::Open, 1, -1);
  EXPECT_EQ(big.paths()[0].path.size(), TriageLog::kMaxText);
}

TEST(TriageLog, HandsOutOnlyWhatChanged) {
  TriageLog log;
  EXPECT_FALSE(log.dirty());
  log.failedLookup("/a", ENOENT, LookupOp::Open, 1, -1);
  log.failedLookup("/b", ENOENT, LookupOp::Open, 2, -1);
  log.failedLibrary("libcudart.so.12", "libcudart.so.12: cannot open shared object file", 3, -1);
  EXPECT_TRUE(log.dirty());
  auto c = log.takeChanges();
  EXPECT_EQ(c.paths.size(), 2u);
  EXPECT_EQ(c.libraries.size(), 1u);
  EXPECT_FALSE(log.dirty());
  EXPECT_TRUE(log.takeChanges().empty());
  log.failedLookup("/b", ENOENT, LookupOp::Open, 5, 1);
  c = log.takeChanges();
  ASSERT_EQ(c.paths.size(), 1u);
  EXPECT_EQ(c.paths[0].path, "/b");
  EXPECT_EQ(c.paths[0].count, 2u);  // cumulative
  EXPECT_EQ(c.paths[0].firstNs, 2);
}

TEST(TriageLog, LibrariesCappedAndCounted) {
  TriageLog log(8, 2);
  EXPECT_TRUE(log.failedLibrary("a.so", "e1", 1, -1));
  EXPECT_TRUE(log.failedLibrary("a.so", "e2", 2, -1));
  EXPECT_TRUE(log.failedLibrary("b.so", "e", 3, -1));
  EXPECT_FALSE(log.failedLibrary("c.so", "e", 4, -1));
  auto libs = log.libraries();
  ASSERT_EQ(libs.size(), 2u);
  EXPECT_EQ(libs[0].count, 2u);
  EXPECT_EQ(libs[0].error, "e2");
}

TEST(TriageLog, ThreadSafe) {
  TriageLog log(64);
  std::vector<std::thread> ts;
  ts.reserve(4);
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) log.failedLookup("/p/" + std::to_string(i % 16), ENOENT, LookupOp::Open, t, -1);
    });
  for (auto& t : ts) t.join();
  uint64_t total = 0;
  for (const auto& p : log.paths()) total += p.count;
  EXPECT_EQ(total, 4000u);
  EXPECT_EQ(log.paths().size(), 16u);
}

TEST(ResourceUsage, Parsers) {
  const char* status = "Name:\tpython3\nVmPeak:\t 1093904 kB\nVmSize:\t  1000 kB\nVmHWM:\t  246976 kB\n";
  EXPECT_EQ(parseStatusKb(status, "VmPeak"), 1093904ull * 1024);
  EXPECT_EQ(parseStatusKb(status, "VmHWM"), 246976ull * 1024);
  EXPECT_EQ(parseStatusKb(status, "VmRSS"), 0u);
  EXPECT_EQ(parseStatusKb("MemTotal:       24684096 kB\n", "MemTotal"), 24684096ull * 1024);

  bool v2 = false;
  EXPECT_EQ(memoryCgroupPath("12:cpu,cpuacct:/x\n4:memory:/process_api/6ea3\n0::/\n", v2), "/process_api/6ea3");
  EXPECT_FALSE(v2);
  EXPECT_EQ(memoryCgroupPath("0::/user.slice/job-1.scope\n", v2), "/user.slice/job-1.scope");
  EXPECT_TRUE(v2);
  EXPECT_EQ(memoryCgroupPath("5:cpuset,memory:/a\n", v2), "/a");

  EXPECT_EQ(parseMemoryLimit("max\n"), 0u);
  EXPECT_EQ(parseMemoryLimit("9223372036854771712\n"), 0u);  // v1 "unlimited"
  EXPECT_EQ(parseMemoryLimit("8589934592\n"), 8589934592ull);
  EXPECT_EQ(parseOomKill("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\n"), 2);
  EXPECT_EQ(parseOomKill("oom_kill_disable 0\nunder_oom 0\noom_kill 7\n"), 7);
  EXPECT_EQ(parseOomKill("nothing\n"), -1);
}

TEST(ResourceUsage, SamplesThisProcess) {
  ResourceSample q = sampleSelfQuick();
  EXPECT_GT(q.maxRssBytes, 0u);
  ResourceSample f = sampleSelfFull();
  EXPECT_GE(f.maxRssBytes, q.maxRssBytes);
  EXPECT_GT(f.vmPeakBytes, 0u);
  EXPECT_GT(f.memTotal, 0u);
}

}  // namespace
}  // namespace dlrr
