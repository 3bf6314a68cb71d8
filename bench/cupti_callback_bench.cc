// Micro-benchmark of GPU capture's callback path, on the CPU with synthetic callback data.
//
// A kernel launch through the CUDA runtime makes CUPTI call us four times: runtime enter,
// driver enter (nested), driver exit, runtime exit. We time those four calls as CUPTI makes
// them (GpuCapture::callback -> decoder -> LaunchTracker), with a drain thread emptying the
// rings concurrently, and report nanoseconds per launch. Also: the tracker alone, two
// launching threads, host->device copies (digest cost per byte), and the drain thread's cost
// per launch when it encodes into a real trace (RecordSession + GpuRecorder).
//
//   dlrr_cupti_callback_bench [launches]      (default 2,000,000)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "interpose/cupti/CuptiDecode.h"
#include "interpose/cupti/GpuCapture.h"
#include "recorder/GpuRecorder.h"
#include "recorder/RecordSession.h"
#include "session/LaunchTracker.h"
#include "tests/support/FakeCuptiApi.h"

#if DLRR_HAVE_CUPTI
#include <cupti.h>
#endif

using namespace dlrr;
using Clock = std::chrono::steady_clock;

namespace {

struct CountingSink : gpu::LaunchSink {
  std::atomic<uint64_t> launches{0}, copies{0}, names{0};
  void name(uint32_t, std::string_view) override { names.fetch_add(1, std::memory_order_relaxed); }
  void launch(const gpu::LaunchEvent&) override { launches.fetch_add(1, std::memory_order_relaxed); }
  void memcpy(const gpu::MemcpyEvent&) override { copies.fetch_add(1, std::memory_order_relaxed); }
};

// Drains every millisecond, like GpuRecorder's thread does every 50 ms (more often = harsher).
class Drainer {
 public:
  Drainer(gpu::LaunchTracker& t, gpu::LaunchSink& s) : t_(t), s_(s), th_([this] { run(); }) {}
  ~Drainer() {
    stop_.store(true);
    th_.join();
    t_.drain(s_);
  }

 private:
  void run() {
    while (!stop_.load()) {
      t_.drain(s_);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  gpu::LaunchTracker& t_;
  gpu::LaunchSink& s_;
  std::atomic<bool> stop_{false};
  std::thread th_;
};

constexpr int kKernels = 64;     // distinct kernels, round robin (names cached per thread)
constexpr int kPerStep = 20000;  // launches per step
int gFunctions[kKernels];
std::string gNames[kKernels];

double nsPer(Clock::duration d, uint64_t n) { return std::chrono::duration<double, std::nano>(d).count() / n; }

gpu::LaunchTracker::Options bigRings() {
  gpu::LaunchTracker::Options o;
  o.ringCapacity = size_t{1} << 16;
  return o;
}

// The tracker alone: four ApiCalls per launch. Timed per step; the rings are drained between
// steps, untimed (as dlrecord's drain thread does on another core).
double trackerOnly(uint64_t n) {
  gpu::LaunchTracker t(bigRings());
  CountingSink sink;
  gpu::ApiCall re, de, dx, rx;
  re.domain = gpu::ApiDomain::Runtime;
  re.geometry = gpu::Geometry::Exact;
  re.grid = {128, 1, 1};
  re.block = {256, 1, 1};
  de = re;
  de.domain = gpu::ApiDomain::Driver;
  dx = de;
  dx.site = gpu::Site::Exit;
  rx = re;
  rx.site = gpu::Site::Exit;
  Clock::duration total{};
  for (uint64_t i = 0; i < n;) {
    t.beginStep(static_cast<int64_t>(i / kPerStep));
    auto start = Clock::now();
    for (int k = 0; k < kPerStep && i < n; ++k, ++i) {
      re.function = &gFunctions[i % kKernels];
      re.name = gNames[i % kKernels].c_str();
      t.onApi(re);
      t.onApi(de);
      t.onApi(dx);
      t.onApi(rx);
    }
    total += Clock::now() - start;
    t.endStep(0);
    t.drain(sink);
  }
  if (t.stats().droppedLaunches) std::printf("  (dropped %llu)\n", (unsigned long long)t.stats().droppedLaunches);
  return nsPer(total, n);
}

#if DLRR_HAVE_CUPTI
struct Launch {
  cudaLaunchKernel_v7000_params rp{};
  cuLaunchKernel_params dp{};
  CUpti_CallbackData re{}, de{}, dx{}, rx{};
};

std::vector<Launch> makeLaunches() {
  std::vector<Launch> v(kKernels);
  static int ok = 0;
  for (int k = 0; k < kKernels; ++k) {
    Launch& l = v[k];
    l.rp.func = &gFunctions[k];
    l.rp.gridDim = dim3(128, 1, 1);
    l.rp.blockDim = dim3(256, 1, 1);
    l.rp.stream = reinterpret_cast<cudaStream_t>(uintptr_t{0x10});
    l.dp.f = reinterpret_cast<CUfunction>(uintptr_t{0x1000} + k);
    l.dp.gridDimX = 128, l.dp.gridDimY = 1, l.dp.gridDimZ = 1;
    l.dp.blockDimX = 256, l.dp.blockDimY = 1, l.dp.blockDimZ = 1;
    l.dp.hStream = reinterpret_cast<CUstream>(uintptr_t{0x10});
    for (CUpti_CallbackData* d : {&l.re, &l.de, &l.dx, &l.rx}) {
      d->symbolName = gNames[k].c_str();
      d->context = reinterpret_cast<CUcontext>(uintptr_t{0x500});
      d->contextUid = 1;
      d->functionReturnValue = &ok;
    }
    l.re.callbackSite = l.de.callbackSite = CUPTI_API_ENTER;
    l.dx.callbackSite = l.rx.callbackSite = CUPTI_API_EXIT;
    l.re.functionParams = l.rx.functionParams = &l.rp;
    l.de.functionParams = l.dx.functionParams = &l.dp;
  }
  return v;
}

// The whole callback path as CUPTI drives it. concurrentDrain: a drain thread empties the rings
// every millisecond while the job launches (else between steps, untimed).
double callbackPath(uint64_t n, int threads, bool concurrentDrain) {
  cupti::FakeCuptiApi api;
  gpu::LaunchTracker t(bigRings());
  cupti::GpuCapture cap(api, t);
  if (!cap.start().ok) return -1;
  CountingSink sink;
  std::vector<Launch> launches = makeLaunches();
  std::unique_ptr<Drainer> drainer;
  if (concurrentDrain) drainer = std::make_unique<Drainer>(t, sink);
  std::vector<Clock::duration> per(threads);
  for (uint64_t i = 0; i < n;) {
    t.beginStep(static_cast<int64_t>(i / kPerStep));
    uint64_t chunk = std::min<uint64_t>(kPerStep / threads, n - i);
    std::vector<std::thread> th;
    th.reserve(static_cast<size_t>(threads));
    for (int w = 0; w < threads; ++w)
      th.emplace_back([&, w] {
        auto start = Clock::now();
        for (uint64_t j = 0; j < chunk; ++j) {
          Launch& l = launches[(i + j) % kKernels];
          cupti::GpuCapture::callback(&cap, cupti::kDomainRuntime, 211, &l.re);
          cupti::GpuCapture::callback(&cap, cupti::kDomainDriver, 307, &l.de);
          cupti::GpuCapture::callback(&cap, cupti::kDomainDriver, 307, &l.dx);
          cupti::GpuCapture::callback(&cap, cupti::kDomainRuntime, 211, &l.rx);
        }
        per[w] += Clock::now() - start;
      });
    for (auto& x : th) x.join();
    i += chunk;
    t.endStep(0);
    if (!concurrentDrain) t.drain(sink);
  }
  drainer.reset();
  gpu::LaunchTracker::Stats s = t.stats();
  if (s.droppedLaunches)
    std::printf("  (recorded %llu, dropped %llu)\n", (unsigned long long)s.launches,
                (unsigned long long)s.droppedLaunches);
  cap.stop();
  double worst = 0;
  for (auto& d : per) worst = std::max(worst, nsPer(d, n));
  return worst;
}

// Host->device copies of `bytes`: the digest at the enter site dominates.
double copyPath(uint64_t n, size_t bytes) {
  cupti::FakeCuptiApi api;
  gpu::LaunchTracker t(bigRings());
  cupti::GpuCapture cap(api, t);
  if (!cap.start().ok) return -1;
  CountingSink sink;
  std::vector<uint8_t> host(bytes, 7);
  cudaMemcpyAsync_v3020_params p{reinterpret_cast<void*>(uintptr_t{0xd000}), host.data(), bytes, cudaMemcpyHostToDevice,
                                 nullptr};
  static int ok = 0;
  CUpti_CallbackData e{}, x{};
  e.callbackSite = CUPTI_API_ENTER;
  x.callbackSite = CUPTI_API_EXIT;
  e.functionParams = x.functionParams = &p;
  e.context = x.context = reinterpret_cast<CUcontext>(uintptr_t{0x500});
  x.functionReturnValue = &ok;
  Drainer d(t, sink);
  t.beginStep(0);
  auto start = Clock::now();
  for (uint64_t i = 0; i < n; ++i) {
    cupti::GpuCapture::callback(&cap, cupti::kDomainRuntime, 41, &e);
    cupti::GpuCapture::callback(&cap, cupti::kDomainRuntime, 41, &x);
  }
  double r = nsPer(Clock::now() - start, n);
  cap.stop();
  return r;
}
#endif

// The drain thread's cost when it encodes into a real trace: launches per second it sustains.
double drainEncode(uint64_t n) {
  char tmpl[] = "/tmp/dlrr-cupti-bench-XXXXXX";
  if (!::mkdtemp(tmpl)) return -1;
  std::string dir = std::string(tmpl) + "/t";
  Config c;
  c.mode = Mode::Record;
  c.traceDir = dir;
  double ns = -1;
  {
    RecordSession s(c);
    gpu::LaunchTracker t(bigRings());
    GpuRecorder rec(s, t);
    s.setStepObserver(&rec);
    gpu::ApiCall re;
    re.geometry = gpu::Geometry::Exact;
    re.grid = {128, 1, 1};
    re.block = {256, 1, 1};
    gpu::ApiCall rx = re;
    rx.site = gpu::Site::Exit;
    uint64_t done = 0;
    Clock::duration drainTime{};
    for (int64_t step = 0; done < n; ++step) {
      s.stepBegin(step, 0, static_cast<uint64_t>(step), 0);
      for (int i = 0; i < kPerStep && done < n; ++i, ++done) {
        re.function = &gFunctions[i % kKernels];
        re.name = gNames[i % kKernels].c_str();
        t.onApi(re);
        t.onApi(rx);
      }
      auto start = Clock::now();
      rec.drainNow();
      drainTime += Clock::now() - start;
      s.stepEnd(step, 1.0);
    }
    ns = nsPer(drainTime, n);
    s.onExit(true, 0);
    s.setStepObserver(nullptr);
  }
  std::error_code ec;
  std::filesystem::remove_all(tmpl, ec);
  if (ec) std::fprintf(stderr, "could not remove %s: %s\n", tmpl, ec.message().c_str());
  return ns;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 2000000;
  for (int k = 0; k < kKernels; ++k)
    gNames[k] =
        "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEvi"
        "T0_T1_" +
        std::to_string(k);
  std::printf("GPU capture callback path, %llu launches, synthetic callback data, %u hardware threads\n",
              static_cast<unsigned long long>(n), std::thread::hardware_concurrency());
  trackerOnly(n / 10);  // warm-up
  std::printf("  tracker only (4 ApiCalls per launch):                 %6.1f ns/launch\n", trackerOnly(n));
#if DLRR_HAVE_CUPTI
  callbackPath(n / 10, 1, false);
  std::printf("  CUPTI callback path (runtime+driver, enter+exit):     %6.1f ns/launch  (target <= 500)\n",
              callbackPath(n, 1, false));
  std::printf("  same, with a drain thread running every 1 ms:         %6.1f ns/launch\n", callbackPath(n, 1, true));
  std::printf("  same, two launching threads (slowest thread):         %6.1f ns/launch\n", callbackPath(n, 2, false));
  std::printf("  host->device copy, 4 KiB (probe + digest at enter):   %6.1f ns/copy\n", copyPath(n / 100, 4096));
  std::printf("  host->device copy, 1 MiB (probe + digest at enter):   %6.1f us/copy\n",
              copyPath(2000, 1 << 20) / 1000);
#else
  std::printf("  (built without CUPTI headers: the decoder path is not built)\n");
#endif
  std::printf("  drain thread, encoding into a trace:                  %6.1f ns/launch (off the job's threads)\n",
              drainEncode(std::min<uint64_t>(n, 400000)));
  return 0;
}
