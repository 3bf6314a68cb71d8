// InitializeInjection's work (GpuInjection) with a fake CUPTI, end to end through a real
// RecordSession and ReplaySession: status when capture cannot start, launches into the trace,
// and the replay's launch comparison.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "format/Trace.h"
#include "interpose/cupti/CuptiDecode.h"
#include "interpose/cupti/GpuInjection.h"
#include "replayer/ReplayReport.h"
#include "support/SampleTrace.h"
#include "tests/support/FakeCuptiApi.h"

namespace dlrr::cupti {
namespace {

Config recordConfig(const std::string& dir, int statusFd = -1) {
  Config c;
  c.mode = Mode::Record;
  c.traceDir = dir;
  c.statusFd = statusFd;
  return c;
}

std::string readAll(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

// What the decoder would hand the tracker for a runtime launch and its nested driver launch.
void launch(gpu::LaunchTracker& t, const void* fn, const char* name, uint32_t gridX) {
  gpu::ApiCall c;
  c.op = gpu::ApiOp::Launch;
  c.domain = gpu::ApiDomain::Runtime;
  c.function = fn;
  c.name = name;
  c.grid = {gridX, 1, 1};
  c.block = {128, 1, 1};
  c.geometry = gpu::Geometry::Exact;
  c.device = 0;
  c.site = gpu::Site::Enter;
  t.onApi(c);
  gpu::ApiCall d = c;
  d.domain = gpu::ApiDomain::Driver;
  t.onApi(d);
  d.site = gpu::Site::Exit;
  t.onApi(d);
  c.site = gpu::Site::Exit;
  t.onApi(c);
}

const int kAdd = 0, kMul = 0, kDropout = 0;

// The job: 3 steps of kernels; `gridAtStep1` lets the replay compute differently.
void runJob(gpu::LaunchTracker& t, RecordSession* rec, ReplaySession* rep, uint32_t gridAtStep1 = 8) {
  for (int step = 0; step < 3; ++step) {
    if (rec) rec->stepBegin(step, 0, static_cast<uint64_t>(step), 0);
    if (rep) rep->stepBegin(step, 0, static_cast<uint64_t>(step), 0);
    launch(t, &kAdd, "_Z3addPfS_", 4);
    launch(t, &kDropout, "_Z7dropoutPfj", step == 1 ? gridAtStep1 : 8);
    launch(t, &kMul, "_Z3mulPf", 2);
    if (rec) rec->stepEnd(step, 1.0);
    if (rep) rep->stepEnd(step, 1.0);
  }
}

struct Recorded {
  std::string dir;
  std::map<std::string, std::string> runtime;
  std::vector<std::string> statuses;
  std::vector<std::tuple<int64_t, uint32_t, std::string, uint32_t>> launches;  // step seq name gridX
};

Recorded readTrace(const std::string& dir) {
  Recorded r;
  r.dir = dir;
  auto t = Trace::open(dir);
  std::map<uint32_t, std::string> names;
  t->mainStream()->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
    if (e.isRuntimeInfo())
      for (auto kv : e.getRuntimeInfo().getItems()) r.runtime[kv.getKey().cStr()] = kv.getValue().cStr();
    if (e.isRecorderStatus()) r.statuses.push_back(e.getRecorderStatus().getMessage().cStr());
    if (e.isInternedString()) names[e.getInternedString().getId()] = e.getInternedString().getText().cStr();
    if (e.isCudaLaunch()) {
      auto c = e.getCudaLaunch();
      r.launches.emplace_back(e.getStep(), c.getSeq(), names.at(c.getNameId()), c.getGridX());
    }
  });
  return r;
}

TEST(GpuInjection, CaptureOffIsRecordedAndReportedThroughTheStatusPipe) {
  if (!decoderAvailable()) GTEST_SKIP() << "built without CUPTI headers";
  std::string dir = testing::makeTempDir("gi") + "/t";
  int pipefd[2];
  ASSERT_EQ(::pipe2(pipefd, O_CLOEXEC), 0);
  {
    RecordSession s(recordConfig(dir, pipefd[1]));
    auto api = std::make_unique<FakeCuptiApi>();
    api->subscribeResult = kErrorMultipleSubscribers;
    GpuInjection inj(std::move(api), {}, false);
    std::string st = inj.start(&s, nullptr, nullptr);
    EXPECT_EQ(st.rfind("off: another CUPTI subscriber is active", 0), 0u) << st;
    EXPECT_EQ(inj.start(&s, nullptr, nullptr), st);  // once
    // Recording goes on without GPU capture.
    s.stepBegin(0, 0, 0, 0);
    launch(inj.tracker(), &kAdd, "k", 1);
    s.stepEnd(0, 1.0);
    s.onExit(true, 0);
  }
  ::close(pipefd[1]);
  std::string piped = readAll(pipefd[0]);
  ::close(pipefd[0]);
  EXPECT_NE(piped.find(": GPU capture off: another CUPTI subscriber is active"), std::string::npos) << piped;
  Recorded r = readTrace(dir);
  EXPECT_EQ(r.runtime["gpu.capture"].rfind("off: another CUPTI subscriber", 0), 0u);
  ASSERT_EQ(r.statuses.size(), 1u);
  EXPECT_EQ(r.statuses[0].rfind("GPU capture off: ", 0), 0u);
  EXPECT_TRUE(r.launches.empty());
  EXPECT_EQ(Trace::open(dir)->summarize().steps, 1u);
  testing::removeTree(dir.substr(0, dir.size() - 2));
}

TEST(GpuInjection, TurnedOffByTheEnvironment) {
  std::string dir = testing::makeTempDir("gi") + "/t";
  {
    RecordSession s(recordConfig(dir));
    auto api = std::make_unique<FakeCuptiApi>();
    FakeCuptiApi* fake = api.get();
    GpuInjection inj(std::move(api), {}, false);
    EXPECT_EQ(inj.start(&s, nullptr, "0"), "off: turned off by DLRR_GPU_CAPTURE=0");
    EXPECT_EQ(fake->loads, 0);  // CUPTI never touched
    s.onExit(true, 0);
  }
  testing::removeTree(dir.substr(0, dir.size() - 2));
}

TEST(GpuInjection, LaunchesReachTheTraceAndReplayComparesThem) {
  if (!decoderAvailable()) GTEST_SKIP() << "built without CUPTI headers";
  std::string root = testing::makeTempDir("gi");
  std::string dir = root + "/t";
  {
    RecordSession s(recordConfig(dir));
    GpuInjection inj(std::make_unique<FakeCuptiApi>());  // with its drain thread
    ASSERT_EQ(inj.start(&s, nullptr, nullptr).rfind("on: CUPTI API 130001 (/fake/libcupti.so)", 0), 0u);
    ASSERT_NE(inj.recorder(), nullptr);
    launch(inj.tracker(), &kAdd, "_Z3addPfS_", 99);  // model set-up: outside steps
    runJob(inj.tracker(), &s, nullptr);
    s.onExit(true, 0);  // finishes the drain thread before the stream closes
  }
  Recorded r = readTrace(dir);
  EXPECT_EQ(r.runtime["gpu.capture"].rfind("on: ", 0), 0u);
  EXPECT_EQ(r.runtime["gpu.launches"], "9");
  EXPECT_EQ(r.runtime["gpu.outside_steps"], "1");
  EXPECT_EQ(r.runtime["gpu.dropped"], "0");
  ASSERT_EQ(r.launches.size(), 9u);
  std::sort(r.launches.begin(), r.launches.end());
  EXPECT_EQ(r.launches[0], std::make_tuple(int64_t{0}, 0u, std::string("_Z3addPfS_"), 4u));
  EXPECT_EQ(r.launches[4], std::make_tuple(int64_t{1}, 1u, std::string("_Z7dropoutPfj"), 8u));
  EXPECT_EQ(r.launches[8], std::make_tuple(int64_t{2}, 2u, std::string("_Z3mulPf"), 2u));

  // Replay: the same launches match; a different grid at step 1 is the first differing launch.
  std::string report = root + "/report.txt";
  ::close(::open(report.c_str(), O_CREAT | O_WRONLY, 0600));
  ::setenv("DLRR_REPORT", report.c_str(), 1);
  auto replayOnce = [&](uint32_t gridAtStep1) {
    Config c;
    c.mode = Mode::Replay;
    c.traceDir = dir;
    ReplaySession rep(c, "end");
    EXPECT_TRUE(rep.active());
    EXPECT_EQ(rep.recordedLaunches(1).size(), 3u);
    GpuInjection inj(std::make_unique<FakeCuptiApi>());
    EXPECT_EQ(inj.start(nullptr, &rep, nullptr).rfind("on: ", 0), 0u);
    launch(inj.tracker(), &kAdd, "_Z3addPfS_", 99);
    runJob(inj.tracker(), nullptr, &rep, gridAtStep1);
    rep.writeReport("exit");
    return readReplayReportFile(report);
  };
  ReplayReport same = replayOnce(8);
  ASSERT_TRUE(same.attached);
  ASSERT_TRUE(same.gpuCapture);
  // Its first line (the report also says "not started" here, as it always did: see writeGpuReport).
  EXPECT_EQ(same.gpuCapture->substr(0, same.gpuCapture->find('\n')), "on") << *same.gpuCapture;
  ASSERT_TRUE(same.launches);
  EXPECT_EQ(same.launches->stepsChecked, 3);
  EXPECT_EQ(same.launches->stepsMatched, 3);
  EXPECT_FALSE(same.launchDivergence);
  ReplayReport differs = replayOnce(16);
  ASSERT_TRUE(differs.launches && differs.launchDivergence);
  EXPECT_EQ(differs.launches->stepsMatched, 2);
  EXPECT_EQ(differs.launchDivergence->step, 1);
  EXPECT_EQ(differs.launchDivergence->position, 1u);
  EXPECT_EQ(differs.launchDivergence->detail.rfind(
                "launch 1 of step 1: recorded dropout(float*, unsigned int) grid (8,1,1) block (128,1,1) smem 0; "
                "replayed dropout(float*, unsigned int) grid (16,1,1)",
                0),
            0u)
      << differs.launchDivergence->detail;
  ASSERT_FALSE(differs.warnings.empty());
  EXPECT_EQ(differs.warnings[0].rfind("kernel launches differ from the recording at launch 1 of step 1", 0), 0u)
      << differs.warnings[0];
  ::unsetenv("DLRR_REPORT");
  testing::removeTree(root);
}

TEST(GpuInjection, ReplayWithoutGpuCaptureSaysLaunchesAreNotChecked) {
  if (!decoderAvailable()) GTEST_SKIP() << "built without CUPTI headers";
  std::string root = testing::makeTempDir("gi");
  std::string dir = root + "/t";
  {
    RecordSession s(recordConfig(dir));
    GpuInjection inj(std::make_unique<FakeCuptiApi>(), {}, false);
    ASSERT_EQ(inj.start(&s, nullptr, nullptr).rfind("on:", 0), 0u);
    runJob(inj.tracker(), &s, nullptr);
    s.onExit(true, 0);
  }
  std::string report = root + "/report.txt";
  ::close(::open(report.c_str(), O_CREAT | O_WRONLY, 0600));
  ::setenv("DLRR_REPORT", report.c_str(), 1);
  {
    Config c;
    c.mode = Mode::Replay;
    c.traceDir = dir;
    ReplaySession rep(c, "end");
    auto api = std::make_unique<FakeCuptiApi>();
    api->subscribeResult = kErrorUnknown;
    GpuInjection inj(std::move(api));
    EXPECT_EQ(inj.start(nullptr, &rep, nullptr).rfind("off: CUPTI cannot initialise", 0), 0u);
    rep.stepBegin(0, 0, 0, 0);
    rep.stepEnd(0, 1.0);
    rep.writeReport("exit");
  }
  ReplayReport r = readReplayReportFile(report);
  ASSERT_TRUE(r.gpuCapture);
  EXPECT_EQ(r.gpuCapture->rfind("off: CUPTI cannot initialise", 0), 0u) << *r.gpuCapture;
  bool said = false;
  for (const auto& w : r.warnings) said = said || w.find("launch sequences are not checked") != std::string::npos;
  EXPECT_TRUE(said);
  EXPECT_FALSE(r.launchDivergence);
  ::unsetenv("DLRR_REPORT");
  testing::removeTree(root);
}

TEST(GpuInjection, NoComparisonWhenCaptureWasOffWhenRecorded) {
  if (!decoderAvailable()) GTEST_SKIP() << "built without CUPTI headers";
  std::string root = testing::makeTempDir("gi");
  std::string dir = root + "/t";
  {
    RecordSession s(recordConfig(dir));
    auto api = std::make_unique<FakeCuptiApi>();
    api->subscribeResult = kErrorMultipleSubscribers;  // a profiler held CUPTI while recording
    GpuInjection inj(std::move(api), {}, false);
    inj.start(&s, nullptr, nullptr);
    runJob(inj.tracker(), &s, nullptr);
    s.onExit(true, 0);
  }
  std::string report = root + "/report.txt";
  ::close(::open(report.c_str(), O_CREAT | O_WRONLY, 0600));
  ::setenv("DLRR_REPORT", report.c_str(), 1);
  {
    Config c;
    c.mode = Mode::Replay;
    c.traceDir = dir;
    ReplaySession rep(c, "end");
    GpuInjection inj(std::make_unique<FakeCuptiApi>());
    ASSERT_EQ(inj.start(nullptr, &rep, nullptr).rfind("on:", 0), 0u);
    runJob(inj.tracker(), nullptr, &rep);
    rep.writeReport("exit");
  }
  ReplayReport r = readReplayReportFile(report);
  ASSERT_TRUE(r.gpuRecorded);
  EXPECT_EQ(r.gpuRecorded->rfind("off: another CUPTI subscriber", 0), 0u) << *r.gpuRecorded;
  EXPECT_FALSE(r.launches);
  for (const auto& w : r.warnings) EXPECT_EQ(w.find("kernel launches differ"), std::string::npos) << w;
  ::unsetenv("DLRR_REPORT");
  testing::removeTree(root);
}

TEST(GpuInjection, AStopInsideAStepComparesTheLaunchesSoFar) {
  if (!decoderAvailable()) GTEST_SKIP() << "built without CUPTI headers";
  std::string root = testing::makeTempDir("gi");
  std::string dir = root + "/t";
  {
    RecordSession s(recordConfig(dir));
    GpuInjection inj(std::make_unique<FakeCuptiApi>(), {}, false);
    ASSERT_EQ(inj.start(&s, nullptr, nullptr).rfind("on:", 0), 0u);
    runJob(inj.tracker(), &s, nullptr);
    s.onExit(true, 0);
  }
  std::string report = root + "/report.txt";
  ::close(::open(report.c_str(), O_CREAT | O_WRONLY, 0600));
  ::setenv("DLRR_REPORT", report.c_str(), 1);
  {
    Config c;
    c.mode = Mode::Replay;
    c.traceDir = dir;
    ReplaySession rep(c, "end");
    GpuInjection inj(std::make_unique<FakeCuptiApi>());
    ASSERT_EQ(inj.start(nullptr, &rep, nullptr).rfind("on:", 0), 0u);
    rep.stepBegin(0, 0, 0, 0);
    launch(inj.tracker(), &kAdd, "_Z3addPfS_", 4);
    launch(inj.tracker(), &kDropout, "_Z7dropoutPfj", 8);
    rep.writeReport("divergence");  // e.g. a module digest differed here: what ran so far matched
  }
  ReplayReport r = readReplayReportFile(report);
  EXPECT_EQ(r.launchAtStop,
            "step 0: the 2 launches replayed before the stop match the recording (of 3 recorded in the step)");
  ::unsetenv("DLRR_REPORT");
  testing::removeTree(root);
}

TEST(GpuInjection, LaunchesCheckedNowAreNotComparedAgainAtTheStop) {
  // Anomaly mode armed by the replay launches checks of its own in backward, from autograd's
  // threads: the launches are compared up to that point, the replay's own ones are not a
  // divergence, and a replay whose capture ran says "on" alone.
  if (!decoderAvailable()) GTEST_SKIP() << "built without CUPTI headers";
  std::string root = testing::makeTempDir("gi");
  std::string dir = root + "/t";
  {
    RecordSession s(recordConfig(dir));
    GpuInjection inj(std::make_unique<FakeCuptiApi>(), {}, false);
    ASSERT_EQ(inj.start(&s, nullptr, nullptr).rfind("on:", 0), 0u);
    runJob(inj.tracker(), &s, nullptr);
    s.onExit(true, 0);
  }
  std::string report = root + "/report.txt";
  ::close(::open(report.c_str(), O_CREAT | O_WRONLY, 0600));
  ::setenv("DLRR_REPORT", report.c_str(), 1);
  {
    Config c;
    c.mode = Mode::Replay;
    c.traceDir = dir;
    ReplaySession rep(c, "end");
    GpuInjection inj(std::make_unique<FakeCuptiApi>());
    ASSERT_EQ(inj.start(nullptr, &rep, nullptr).rfind("on:", 0), 0u);
    rep.stepBegin(0, 0, 0, 0);
    launch(inj.tracker(), &kAdd, "_Z3addPfS_", 4);
    launch(inj.tracker(), &kDropout, "_Z7dropoutPfj", 8);
    rep.checkLaunchesNow("before backward()");
    launch(inj.tracker(), &kAdd, "_Z6isnanPf", 1);  // not the recording's third launch
    rep.writeReport("target");
  }
  ReplayReport r = readReplayReportFile(report);
  EXPECT_EQ(r.launchAtStop,
            "step 0: the 2 launches replayed before backward() match the recording (of 3 recorded in the step)");
  EXPECT_FALSE(r.launchDivergence);
  ASSERT_TRUE(r.gpuCapture);
  EXPECT_EQ(*r.gpuCapture, "on");
  ::unsetenv("DLRR_REPORT");
  testing::removeTree(root);
}

}  // namespace
}  // namespace dlrr::cupti
