// replayer/ReplayReport: the typed report between the replayed job and dlreplay (one Cap'n
// Proto message a file, replaced whole), its named entries, and what a reader makes of a file
// that is not a report.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "replayer/ReplayReport.h"
#include "support/SampleTrace.h"

namespace dlrr {
namespace {

ReplayReport fullReport() {
  ReplayReport r;
  r.attached = true;
  r.stop = ReplayReport::Stop::Divergence;
  r.target = "nan";
  r.targetStep = 30;
  r.targetWhere = "conv1";
  r.verifiedSteps = 3;
  r.recordedSteps = 128;
  r.lastStep = 2;
  r.jumpStep = 1;
  r.divergence = ReplayReport::Divergence{3, "module output", "", "a\tb\nc\\d"};
  r.gpuCapture = "on\nnot started";
  r.gpuRecorded = "";
  r.launches = ReplayReport::Launches{3, 2};
  r.launchDivergence = ReplayReport::LaunchDivergence{1, 4, "launch 1 of step 1"};
  r.launchAtStop = "mul";
  r.incomparableDigests = 2;
  r.dist = ReplayReport::Dist{1, 3, 5, 4, 2};
  EXPECT_TRUE(addHookFact(r, "stop.step", "-"));
  EXPECT_TRUE(addHookFact(r, "stop.where", "before module conv1"));
  EXPECT_TRUE(addHookFact(r, "batch.samples", "sample 5"));
  EXPECT_TRUE(addHookFact(r, "batch.samples", "sample 6"));
  EXPECT_TRUE(addHookFact(r, "exception", "KeyError: 'k'"));
  EXPECT_TRUE(addHookFact(r, "exception.where", ""));  // said, though empty
  EXPECT_TRUE(addHookFact(r, "verify.unverified", "compiled: m"));
  EXPECT_TRUE(addHookFact(r, "env.threads", "1"));
  EXPECT_TRUE(addHookFact(r, "env.threads", "2"));  // said twice: both, one a line
  EXPECT_TRUE(addHookFact(r, "dist.group", "rank 0 of 2 replayed alone"));
  EXPECT_TRUE(addHookFact(r, "dist.comm_hook", "not run"));
  EXPECT_TRUE(addHookFact(r, "warning", "first"));
  r.warnings.push_back("second\nline");
  return r;
}

TEST(ReplayReport, EveryFieldRoundTrips) {
  ReplayReport r = fullReport();
  EXPECT_EQ(*r.envThreads, "1\n2");
  EXPECT_EQ(decodeReplayReport(encodeReplayReport(r)), r);
  ReplayReport bare;  // attached, nothing optional said
  bare.attached = true;
  ReplayReport back = decodeReplayReport(encodeReplayReport(bare));
  EXPECT_EQ(back, bare);
  EXPECT_FALSE(back.jumpStep || back.divergence || back.gpuCapture || back.dist || back.exception);
}

TEST(ReplayReport, StopsAreNamedAsTheHookNamesThem) {
  for (const char* s : {"running", "exit", "target", "end-of-recording", "divergence", "unservable", "stop"})
    EXPECT_STREQ(stopName(parseStop(s)), s);
  EXPECT_EQ(parseStop("something new"), ReplayReport::Stop::Stop);
}

TEST(ReplayReport, UnknownHookFactsAreRefused) {
  ReplayReport r;
  EXPECT_FALSE(addHookFact(r, "no.such", "x"));
  EXPECT_EQ(r, ReplayReport{});
}

TEST(ReplayReport, EntriesKeepTheReportsNames) {
  auto e = reportEntries(fullReport());
  EXPECT_EQ(e["stop"], "divergence");
  EXPECT_EQ(e["verified_steps"], "3");
  EXPECT_EQ(e["jump.step"], "1");
  EXPECT_EQ(e["divergence.step"], "3");
  EXPECT_EQ(e["divergence.path"], "");
  EXPECT_EQ(e["divergence.detail"], "a\tb\nc\\d");
  EXPECT_EQ(e["gpu.recorded"], "");
  EXPECT_EQ(e["launch.divergence.position"], "4");
  EXPECT_EQ(e["digests.incomparable"], "2");
  EXPECT_EQ(e["dist.rank"], "1");
  EXPECT_EQ(e["dist.collectives"], "3 of 5 recorded issued; 4 tensors verified; 2 results served");
  EXPECT_EQ(e["dist.group"], "rank 0 of 2 replayed alone");
  EXPECT_EQ(e["dist.comm_hook"], "not run");
  EXPECT_EQ(e["batch.samples"], "sample 5\nsample 6");
  EXPECT_EQ(e["exception.where"], "");
  EXPECT_EQ(e["warning"], "first\nsecond\nline");
  ReplayReport bare;
  bare.attached = true;
  auto b = reportEntries(bare);
  for (const char* absent : {"jump.step", "divergence.step", "gpu.capture", "launch.steps_checked",
                             "digests.incomparable", "dist.rank", "exception", "warning", "stop.step"})
    EXPECT_EQ(b.count(absent), 0u) << absent;
  EXPECT_TRUE(reportEntries(ReplayReport{}).empty());
}

TEST(ReplayReport, AFileIsReplacedWholeAndOnlyIfDlreplayMadeIt) {
  std::string dir = testing::makeTempDir("report");
  std::string path = dir + "/report";
  ReplayReport r = fullReport();
  EXPECT_FALSE(writeReplayReportFile(path, r));  // no file: not dlreplay's, nothing written
  EXPECT_FALSE(std::filesystem::exists(path));
  ::close(::open(path.c_str(), O_CREAT | O_WRONLY, 0600));
  EXPECT_FALSE(readReplayReportFile(path).attached);  // made, never written: no report
  ASSERT_TRUE(writeReplayReportFile(path, r));
  EXPECT_EQ(readReplayReportFile(path), r);
  r.verifiedSteps = 4;
  ASSERT_TRUE(writeReplayReportFile(path, r));
  EXPECT_EQ(readReplayReportFile(path), r);
  // A symlink in its place is not followed.
  std::string other = dir + "/other";
  ::symlink(other.c_str(), (dir + "/link").c_str());
  EXPECT_FALSE(writeReplayReportFile(dir + "/link", r));
  EXPECT_FALSE(std::filesystem::exists(other));
  // Only the report is left: no temporary file.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.path().filename() != "link";
  EXPECT_EQ(files, 1);
  testing::removeTree(dir);
}

TEST(ReplayReport, ATruncatedOrForeignFileIsNoReport) {
  std::string bytes = encodeReplayReport(fullReport());
  for (size_t n : {size_t{0}, size_t{1}, size_t{8}, bytes.size() / 2, bytes.size() - 8, bytes.size() - 1})
    EXPECT_FALSE(decodeReplayReport(std::string_view(bytes).substr(0, n)).attached) << n;
  EXPECT_FALSE(decodeReplayReport(bytes + std::string(8, '\0')).attached);      // trailing words
  EXPECT_FALSE(decodeReplayReport("stop\tend\nverified_steps\t4\n").attached);  // the old text report
  std::string garbage(64, '\xff');
  EXPECT_FALSE(decodeReplayReport(garbage).attached);
  EXPECT_FALSE(readReplayReportFile("/nonexistent/dlrr-report").attached);
  EXPECT_TRUE(reportEntries(decodeReplayReport(garbage)).empty());
}

TEST(ReplayReport, TemporariesOfAKilledWriterAreRemoved) {
  std::string dir = testing::makeTempDir("report");
  std::string path = dir + "/dlreplay-report-abc";
  for (const char* name : {"dlreplay-report-abc", "dlreplay-report-abc.tmp.12.12", "dlreplay-report-abc.rank1",
                           "dlreplay-report-abc.rank1.tmp.13.14", "dlreplay-report-abcd.tmp.1.1", "unrelated.tmp.1"})
    ::close(::open((dir + "/" + name).c_str(), O_CREAT | O_WRONLY, 0600));
  removeReplayReportTemporaries(path);
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir)) left.push_back(e.path().filename());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"dlreplay-report-abc", "dlreplay-report-abc.rank1",
                                            "dlreplay-report-abcd.tmp.1.1", "unrelated.tmp.1"}));
  testing::removeTree(dir);
}

}  // namespace
}  // namespace dlrr
