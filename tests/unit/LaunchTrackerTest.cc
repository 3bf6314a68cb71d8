// LaunchTracker: the pure logic of GPU capture, fed synthetic callbacks (no CUDA anywhere).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "format/Hash.h"
#include "session/LaunchTracker.h"

namespace dlrr::gpu {
namespace {

struct CollectingSink : LaunchSink {
  std::map<uint32_t, std::string> names;
  std::vector<std::string> order;  // "name:ID", "launch:STEP:SEQ", "memcpy:STEP:SEQ"
  std::vector<LaunchEvent> launches;
  std::vector<MemcpyEvent> copies;
  std::vector<std::tuple<int64_t, uint64_t, uint64_t>> drops;
  void name(uint32_t id, std::string_view text) override {
    EXPECT_FALSE(names.count(id)) << "name " << id << " delivered twice";
    names[id] = std::string(text);
    order.push_back("name:" + std::to_string(id));
  }
  void launch(const LaunchEvent& e) override {
    EXPECT_TRUE(names.count(e.nameId)) << "launch before its name";
    launches.push_back(e);
    order.push_back("launch:" + std::to_string(e.step) + ":" + std::to_string(e.seq));
  }
  void memcpy(const MemcpyEvent& e) override {
    copies.push_back(e);
    order.push_back("memcpy:" + std::to_string(e.step) + ":" + std::to_string(e.seq));
  }
  void dropped(int64_t step, uint64_t l, uint64_t c) override { drops.emplace_back(step, l, c); }
  std::string nameOf(const LaunchEvent& e) const { return names.at(e.nameId); }
};

// Kernel "functions": any distinct addresses do.
const int kFnA = 0, kFnB = 0, kDriverFnA = 0;

ApiCall runtimeLaunch(Site site, const void* fn = &kFnA, const char* name = "_Z7kernelAPf", Dim3 grid = {4, 1, 1},
                      Dim3 block = {128, 1, 1}, Geometry g = Geometry::Exact) {
  ApiCall c;
  c.op = ApiOp::Launch;
  c.domain = ApiDomain::Runtime;
  c.site = site;
  c.cbid = 211;
  c.function = fn;
  c.name = name;
  c.grid = grid;
  c.block = block;
  c.sharedMem = 64;
  c.geometry = g;
  c.stream = 7;
  c.device = 0;
  c.correlationId = 100;
  return c;
}

ApiCall driverLaunch(Site site, const void* fn = &kDriverFnA, const char* name = "_Z7kernelAPf", Dim3 grid = {4, 1, 1},
                     Dim3 block = {128, 1, 1}) {
  ApiCall c = runtimeLaunch(site, fn, name, grid, block, Geometry::Exact);
  c.domain = ApiDomain::Driver;
  c.cbid = 307;
  c.correlationId = 101;
  return c;
}

// A runtime launch with the driver launch it causes nested inside, as CUPTI reports them.
void launchViaRuntime(LaunchTracker& t, const void* fn = &kFnA, const char* name = "_Z7kernelAPf",
                      Dim3 grid = {4, 1, 1}) {
  t.onApi(runtimeLaunch(Site::Enter, fn, name, grid));
  t.onApi(driverLaunch(Site::Enter, &kDriverFnA, name, grid));
  t.onApi(driverLaunch(Site::Exit));
  t.onApi(runtimeLaunch(Site::Exit));
}

ApiCall copy(Site site, CopyDirection dir, const void* host, uint64_t bytes, ApiDomain domain = ApiDomain::Runtime) {
  ApiCall c;
  c.op = ApiOp::Memcpy;
  c.domain = domain;
  c.site = site;
  c.cbid = domain == ApiDomain::Runtime ? 41 : 277;
  c.direction = dir;
  c.hostSrc = host;
  c.bytes = bytes;
  c.stream = 3;
  c.device = 0;
  return c;
}

TEST(LaunchTracker, RuntimeLaunchAndItsNestedDriverLaunchRecordOnce) {
  LaunchTracker t;
  t.beginStep(0);
  launchViaRuntime(t);
  t.endStep(0);
  CollectingSink s;
  EXPECT_EQ(t.drain(s), 1u);
  ASSERT_EQ(s.launches.size(), 1u);
  const LaunchEvent& e = s.launches[0];
  EXPECT_EQ(e.step, 0);
  EXPECT_EQ(e.seq, 0u);
  EXPECT_EQ(s.nameOf(e), "_Z7kernelAPf");
  EXPECT_EQ(e.grid, (Dim3{4, 1, 1}));
  EXPECT_EQ(e.block, (Dim3{128, 1, 1}));
  EXPECT_EQ(e.sharedMem, 64u);
  EXPECT_EQ(e.correlationId, 100u);  // the outermost (runtime) call's
  EXPECT_TRUE(e.flags & kFlagGeomExact);
  EXPECT_FALSE(e.flags & kFlagFailed);
  EXPECT_EQ(t.stats().nested, 1u);
}

TEST(LaunchTracker, NestedDriverCallCompletesTheMirroredOrMissingGeometry) {
  LaunchTracker t;
  t.beginStep(0);
  // __cudaLaunchKernel: geometry from the mirrored layout, then the exact driver one wins.
  ApiCall outer = runtimeLaunch(Site::Enter, &kFnA, "k", {1, 1, 1}, {1, 1, 1}, Geometry::Mirrored);
  outer.cbid = 505;
  t.onApi(outer);
  t.onApi(driverLaunch(Site::Enter, &kDriverFnA, "k", {9, 2, 1}, {256, 1, 1}));
  t.onApi(driverLaunch(Site::Exit));
  t.onApi(runtimeLaunch(Site::Exit));
  // No parameters at all (null functionParams), device unknown: all from the driver call.
  ApiCall bare = runtimeLaunch(Site::Enter, &kFnB, "k2", {}, {}, Geometry::None);
  bare.device = kUnknownDevice;
  bare.stream = 0;
  t.onApi(bare);
  ApiCall drv = driverLaunch(Site::Enter, &kDriverFnA, "k2", {3, 3, 3}, {32, 4, 1});
  drv.device = 2;
  drv.stream = 99;
  t.onApi(drv);
  t.onApi(driverLaunch(Site::Exit));
  t.onApi(runtimeLaunch(Site::Exit));
  CollectingSink s;
  t.drain(s);
  ASSERT_EQ(s.launches.size(), 2u);
  EXPECT_EQ(s.launches[0].grid, (Dim3{9, 2, 1}));
  EXPECT_EQ(s.launches[0].block, (Dim3{256, 1, 1}));
  EXPECT_TRUE(s.launches[0].flags & kFlagGeomExact);
  EXPECT_TRUE(s.launches[0].flags & kFlagEnriched);
  EXPECT_FALSE(s.launches[0].flags & kFlagGeomMirrored);
  EXPECT_EQ(s.launches[1].grid, (Dim3{3, 3, 3}));
  EXPECT_EQ(s.launches[1].device, 2u);
  EXPECT_EQ(s.launches[1].stream, 99u);
  EXPECT_EQ(s.nameOf(s.launches[1]), "k2");
}

TEST(LaunchTracker, DriverOnlyLaunchIsItsOwnOutermostCall) {
  LaunchTracker t;
  t.beginStep(5);
  t.onApi(driverLaunch(Site::Enter, &kDriverFnA, "triton_kernel"));
  t.onApi(driverLaunch(Site::Exit));
  CollectingSink s;
  t.drain(s);
  ASSERT_EQ(s.launches.size(), 1u);
  EXPECT_EQ(s.launches[0].step, 5);
  EXPECT_EQ(s.nameOf(s.launches[0]), "triton_kernel");
  EXPECT_EQ(t.stats().nested, 0u);
}

TEST(LaunchTracker, NamesAreInternedOncePerTextAndDeliveredBeforeUse) {
  LaunchTracker t;
  t.beginStep(0);
  const int other = 0;
  launchViaRuntime(t, &kFnA, "alpha");
  launchViaRuntime(t, &kFnA, "alpha");   // same function
  launchViaRuntime(t, &other, "alpha");  // another function, same name: same id
  launchViaRuntime(t, &kFnB, "beta");
  t.onApi(runtimeLaunch(Site::Enter, nullptr, nullptr));  // nothing known: "<unknown>"
  t.onApi(runtimeLaunch(Site::Exit));
  CollectingSink s;
  t.drain(s);
  ASSERT_EQ(s.launches.size(), 5u);
  EXPECT_EQ(s.launches[0].nameId, s.launches[1].nameId);
  EXPECT_EQ(s.launches[0].nameId, s.launches[2].nameId);
  EXPECT_NE(s.launches[0].nameId, s.launches[3].nameId);
  EXPECT_EQ(s.nameOf(s.launches[3]), "beta");
  EXPECT_EQ(s.nameOf(s.launches[4]), "<unknown>");
  EXPECT_EQ(s.names.size(), 3u);
  EXPECT_EQ(s.order.front().rfind("name:", 0), 0u);
  // Names already delivered are not repeated by later drains.
  t.beginStep(1);
  launchViaRuntime(t, &kFnA, "alpha");
  CollectingSink s2;
  s2.names = s.names;
  t.drain(s2);
  EXPECT_EQ(s2.order, (std::vector<std::string>{"launch:1:0"}));
  EXPECT_EQ(t.stats().names, 3u);
}

TEST(LaunchTracker, AHandleReusedForAnotherKernelIsInternedAfresh) {
  LaunchTracker t;
  t.beginStep(0);
  std::string first = "old_kernel", second = "new_kernel";  // a module unloaded and another loaded
  launchViaRuntime(t, &kFnA, first.c_str());
  launchViaRuntime(t, &kFnA, second.c_str());
  CollectingSink s;
  t.drain(s);
  ASSERT_EQ(s.launches.size(), 2u);
  EXPECT_EQ(s.nameOf(s.launches[0]), "old_kernel");
  EXPECT_EQ(s.nameOf(s.launches[1]), "new_kernel");
}

TEST(LaunchTracker, SequenceNumbersRestartEachStepAndLaunchesBetweenStepsAreOnlyCounted) {
  LaunchTracker t;
  launchViaRuntime(t);  // before the first step: model set-up
  t.beginStep(0);
  for (int i = 0; i < 3; ++i) launchViaRuntime(t);
  t.onApi(copy(Site::Enter, CopyDirection::DeviceToHost, nullptr, 4));
  t.onApi(copy(Site::Exit, CopyDirection::DeviceToHost, nullptr, 4));
  t.endStep(0);
  launchViaRuntime(t);  // between steps: evaluation
  t.beginStep(1);
  for (int i = 0; i < 2; ++i) launchViaRuntime(t);
  t.endStep(1);
  CollectingSink s;
  t.drain(s);
  std::vector<std::string> expected = {"launch:0:0", "launch:0:1", "launch:0:2",
                                       "memcpy:0:0", "launch:1:0", "launch:1:1"};
  std::vector<std::string> got;
  for (auto& o : s.order)
    if (o.rfind("name:", 0) != 0) got.push_back(o);
  EXPECT_EQ(got, expected);
  LaunchTracker::Stats st = t.stats();
  EXPECT_EQ(st.launches, 5u);
  EXPECT_EQ(st.copies, 1u);
  EXPECT_EQ(st.outsideSteps, 2u);
}

TEST(LaunchTracker, DrainsCanHappenMidStepWithoutChangingNumbers) {
  LaunchTracker t;
  t.beginStep(3);
  launchViaRuntime(t);
  CollectingSink s;
  t.drain(s);
  launchViaRuntime(t);
  launchViaRuntime(t);
  t.drain(s);
  ASSERT_EQ(s.launches.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(s.launches[i].seq, i);
    EXPECT_EQ(s.launches[i].step, 3);
  }
}

TEST(LaunchTracker, PerThreadRingsFromSeveralThreads) {
  LaunchTracker t;
  t.beginStep(0);
  constexpr int kThreads = 4, kEach = 2000;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  std::vector<int> fns(kThreads);
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      std::string name = "kernel_of_thread_" + std::to_string(i);
      for (int k = 0; k < kEach; ++k) launchViaRuntime(t, &fns[i], name.c_str(), {static_cast<uint32_t>(k), 1, 1});
    });
  // A drain thread runs concurrently with the producers.
  CollectingSink s;
  std::atomic<bool> done{false};
  std::thread drainer([&] {
    while (!done.load()) t.drain(s);
  });
  for (auto& th : threads) th.join();
  done.store(true);
  drainer.join();
  t.drain(s);
  ASSERT_EQ(s.launches.size(), static_cast<size_t>(kThreads * kEach));
  std::set<uint32_t> seqs;
  std::map<std::string, uint32_t> lastGridOfThread;
  std::map<std::string, uint32_t> lastSeqOfThread;
  std::vector<LaunchEvent> sorted = s.launches;
  std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.seq < b.seq; });
  for (const LaunchEvent& e : sorted) {
    seqs.insert(e.seq);
    std::string n = s.nameOf(e);
    // Within a thread, numbers follow the thread's own order.
    if (lastSeqOfThread.count(n)) {
      EXPECT_EQ(e.grid.x, lastGridOfThread[n] + 1);
    }
    lastSeqOfThread[n] = e.seq;
    lastGridOfThread[n] = e.grid.x;
  }
  EXPECT_EQ(seqs.size(), static_cast<size_t>(kThreads * kEach));
  EXPECT_EQ(*seqs.rbegin(), static_cast<uint32_t>(kThreads * kEach - 1));
  // One ring per thread, or fewer: a finished thread's drained ring serves a later thread.
  EXPECT_LE(t.stats().threads, static_cast<uint64_t>(kThreads));
  EXPECT_EQ(t.stats().droppedLaunches, 0u);
}

TEST(LaunchTracker, ARetiredThreadsRingServesTheNextThread) {
  LaunchTracker t;
  t.beginStep(0);
  std::thread([&] { launchViaRuntime(t); }).join();
  CollectingSink s;
  t.drain(s);
  std::thread([&] { launchViaRuntime(t); }).join();
  t.drain(s);
  EXPECT_EQ(s.launches.size(), 2u);
  EXPECT_EQ(t.stats().threads, 1u);
}

TEST(LaunchTracker, HostToDeviceCopiesAreDigestedAtTheEnterSite) {
  LaunchTracker t;
  t.beginStep(0);
  std::vector<uint8_t> batch(4096);
  for (size_t i = 0; i < batch.size(); ++i) batch[i] = static_cast<uint8_t>(i * 7);
  t.onApi(copy(Site::Enter, CopyDirection::HostToDevice, batch.data(), batch.size()));
  // The driver copy it causes: folded in, not digested twice.
  t.onApi(copy(Site::Enter, CopyDirection::HostToDevice, batch.data(), batch.size(), ApiDomain::Driver));
  t.onApi(copy(Site::Exit, CopyDirection::HostToDevice, nullptr, 0, ApiDomain::Driver));
  t.onApi(copy(Site::Exit, CopyDirection::HostToDevice, nullptr, 0));
  std::fill(batch.begin(), batch.end(), 0);  // changed after the call: the digest is the call's
  t.onApi(copy(Site::Enter, CopyDirection::DeviceToHost, batch.data(), 16));
  t.onApi(copy(Site::Exit, CopyDirection::DeviceToHost, nullptr, 0));
  CollectingSink s;
  t.drain(s);
  ASSERT_EQ(s.copies.size(), 2u);
  std::vector<uint8_t> expect(4096);
  for (size_t i = 0; i < expect.size(); ++i) expect[i] = static_cast<uint8_t>(i * 7);
  EXPECT_EQ(s.copies[0].digest, hash64(expect.data(), expect.size()));
  EXPECT_EQ(s.copies[0].direction, CopyDirection::HostToDevice);
  EXPECT_EQ(s.copies[0].bytes, 4096u);
  EXPECT_TRUE(s.copies[0].flags & kFlagDigest);
  EXPECT_EQ(s.copies[1].digest, 0u);  // device->host: nothing to digest
  EXPECT_EQ(s.copies[1].direction, CopyDirection::DeviceToHost);
  EXPECT_EQ(s.copies[1].seq, 1u);
}

TEST(LaunchTracker, ADefaultKindCopyLearnsItsDirectionFromTheNestedDriverCopy) {
  LaunchTracker t;
  t.beginStep(0);
  uint64_t payload[4] = {1, 2, 3, 4};
  t.onApi(copy(Site::Enter, CopyDirection::Other, nullptr, sizeof payload));  // cudaMemcpyDefault
  t.onApi(copy(Site::Enter, CopyDirection::HostToDevice, payload, sizeof payload, ApiDomain::Driver));
  t.onApi(copy(Site::Exit, CopyDirection::Other, nullptr, 0, ApiDomain::Driver));
  t.onApi(copy(Site::Exit, CopyDirection::Other, nullptr, 0));
  CollectingSink s;
  t.drain(s);
  ASSERT_EQ(s.copies.size(), 1u);
  EXPECT_EQ(s.copies[0].direction, CopyDirection::HostToDevice);
  EXPECT_EQ(s.copies[0].digest, hash64(payload, sizeof payload));
  EXPECT_TRUE(s.copies[0].flags & kFlagEnriched);
}

TEST(LaunchTracker, AnUnreadableHostPointerIsNotReadAndIsFlagged) {
  LaunchTracker t;
  t.beginStep(0);
  // A device pointer passed as host memory (a bug the CUDA call itself reports): the probe
  // keeps the callback from faulting.
  const void* bogus = reinterpret_cast<const void*>(uintptr_t{16});
  t.onApi(copy(Site::Enter, CopyDirection::HostToDevice, bogus, 1 << 20));
  t.onApi(copy(Site::Exit, CopyDirection::HostToDevice, nullptr, 0));
  CollectingSink s;
  t.drain(s);
  ASSERT_EQ(s.copies.size(), 1u);
  EXPECT_EQ(s.copies[0].digest, 0u);
  EXPECT_TRUE(s.copies[0].flags & kFlagUnreadable);
  EXPECT_FALSE(LaunchTracker::probeReadable(bogus, 8));
  int local = 3;
  EXPECT_TRUE(LaunchTracker::probeReadable(&local, sizeof local));
}

TEST(LaunchTracker, AFullRingDropsAndCountsNeverBlocks) {
  LaunchTracker::Options o;
  o.ringCapacity = 8;
  LaunchTracker t(o);
  t.beginStep(2);
  for (int i = 0; i < 20; ++i) launchViaRuntime(t);
  CollectingSink s;
  t.drain(s);
  EXPECT_EQ(s.launches.size(), 8u);
  ASSERT_EQ(s.drops.size(), 1u);
  EXPECT_EQ(std::get<0>(s.drops[0]), 2);
  EXPECT_EQ(std::get<1>(s.drops[0]), 12u);
  EXPECT_EQ(t.stats().droppedLaunches, 12u);
  // The numbering shows the gap to whoever compares sequences: 0..7 delivered, 8..19 lost.
  EXPECT_EQ(s.launches.back().seq, 7u);
  // Drained, the ring takes records again; drops are reported once.
  launchViaRuntime(t);
  CollectingSink s2;
  s2.names = s.names;
  t.drain(s2);
  ASSERT_EQ(s2.launches.size(), 1u);
  EXPECT_EQ(s2.launches[0].seq, 20u);
  EXPECT_TRUE(s2.drops.empty());
}

TEST(LaunchTracker, FailedLaunchesAreFlaggedAndStrayExitsIgnored) {
  LaunchTracker t;
  t.beginStep(0);
  t.onApi(runtimeLaunch(Site::Exit));  // an exit whose enter came before the subscription
  t.onApi(runtimeLaunch(Site::Enter));
  ApiCall exit = runtimeLaunch(Site::Exit);
  exit.result = 98;  // cudaErrorInvalidDeviceFunction
  t.onApi(exit);
  CollectingSink s;
  t.drain(s);
  ASSERT_EQ(s.launches.size(), 1u);
  EXPECT_TRUE(s.launches[0].flags & kFlagFailed);
}

TEST(LaunchTracker, APausedThreadsLaunchesAreNotTheJobs) {
  LaunchTracker t;
  t.beginStep(0);
  launchViaRuntime(t, &kFnA, "job_kernel");
  t.pauseThread(true);  // the hook's digest kernels
  t.pauseThread(true);
  launchViaRuntime(t, &kFnB, "digest_kernel");
  t.pauseThread(false);
  launchViaRuntime(t, &kFnB, "digest_kernel");
  t.pauseThread(false);
  std::thread other([&] { launchViaRuntime(t, &kFnA, "job_kernel"); });  // pauses are per thread
  other.join();
  launchViaRuntime(t, &kFnA, "job_kernel");
  CollectingSink s;
  t.drain(s);
  ASSERT_EQ(s.launches.size(), 3u);
  for (auto& e : s.launches) EXPECT_EQ(s.nameOf(e), "job_kernel");
  std::vector<uint32_t> seqs;
  seqs.reserve(s.launches.size());
  for (auto& e : s.launches) seqs.push_back(e.seq);
  std::sort(seqs.begin(), seqs.end());
  EXPECT_EQ(seqs, (std::vector<uint32_t>{0, 1, 2}));  // no holes where the hook's kernels ran
  EXPECT_EQ(t.stats().paused, 8u);
}

TEST(LaunchTracker, DisabledTrackerRecordsNothing) {
  LaunchTracker t;
  t.beginStep(0);
  t.disable();
  launchViaRuntime(t);
  CollectingSink s;
  EXPECT_EQ(t.drain(s), 0u);
  EXPECT_EQ(t.stats().threads, 0u);
}

TEST(LaunchTracker, DisplayNamesAreDemangledAndCut) {
  EXPECT_EQ(displayKernelName("_Z7kernelAPf"), "kernelA(float*)");
  EXPECT_EQ(displayKernelName("not_mangled"), "not_mangled");
  EXPECT_EQ(displayKernelName(std::string(300, 'x'), 20).size(), 20u);
}

}  // namespace
}  // namespace dlrr::gpu
