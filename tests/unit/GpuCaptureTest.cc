// GPU capture start-up and callback decoding with a fake CUPTI, and the real CUPTI's refusal
// on a machine without a driver. Callback data is built as CUPTI builds it
// (CUpti_CallbackData + the documented params structs), so these need the toolkit's headers.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "format/Hash.h"
#include "interpose/cupti/CuptiDecode.h"
#include "interpose/cupti/CuptiIds.h"
#include "interpose/cupti/GpuCapture.h"
#include "tests/support/FakeCuptiApi.h"

#if DLRR_HAVE_CUPTI
#include <cupti.h>
#endif

namespace dlrr::cupti {
namespace {

struct Sink : gpu::LaunchSink {
  std::map<uint32_t, std::string> names;
  std::vector<gpu::LaunchEvent> launches;
  std::vector<gpu::MemcpyEvent> copies;
  void name(uint32_t id, std::string_view t) override { names[id] = std::string(t); }
  void launch(const gpu::LaunchEvent& e) override { launches.push_back(e); }
  void memcpy(const gpu::MemcpyEvent& e) override { copies.push_back(e); }
};

TEST(GpuCapture, StartEnablesLaunchAndCopyCallbacksOfBothDomains) {
  if (!decoderAvailable()) GTEST_SKIP() << "built without CUPTI headers: GPU capture cannot start";
  FakeCuptiApi api;
  gpu::LaunchTracker tracker;
  GpuCapture cap(api, tracker);
  GpuCapture::Status st = cap.start();
  ASSERT_TRUE(st.ok) << st.message;
  EXPECT_TRUE(cap.running());
  EXPECT_EQ(api.subscribes, 1);
  // The CBIDs docs/gpu.md lists: driver 307/442, 652/653; runtime 211/214, 430/431, 505/506.
  for (uint32_t id : {307u, 442u, 652u, 653u, 477u, 478u}) EXPECT_TRUE(api.isEnabled(kDomainDriver, id)) << id;
  for (uint32_t id : {211u, 214u, 430u, 431u, 505u, 506u, 269u, 270u})
    EXPECT_TRUE(api.isEnabled(kDomainRuntime, id)) << id;
  for (uint32_t id : {31u, 41u, 215u, 225u}) EXPECT_TRUE(api.isEnabled(kDomainRuntime, id)) << id;
  for (uint32_t id : {276u, 277u, 278u, 279u, 280u, 281u, 305u, 306u})
    EXPECT_TRUE(api.isEnabled(kDomainDriver, id)) << id;
  EXPECT_EQ(st.enabledLaunchCallbacks, 14);
  EXPECT_EQ(st.enabledCopyCallbacks, 20);
  EXPECT_NE(st.message.find("API 130001"), std::string::npos) << st.message;
  EXPECT_TRUE(st.notes.empty());
  // Never a whole domain: only the callbacks we decode.
  for (auto& [en, d, c] : api.enabled) EXPECT_NE(c, UINT32_MAX);
  cap.stop();
  EXPECT_EQ(api.unsubscribes, 1);
}

TEST(GpuCapture, DriverApiOnlyEnablesNoRuntimeCallback) {
  if (!decoderAvailable()) GTEST_SKIP() << "built without CUPTI headers: GPU capture cannot start";
  FakeCuptiApi api;
  gpu::LaunchTracker tracker;
  GpuCapture cap(api, tracker);
  GpuCapture::Status st = cap.start(false);
  ASSERT_TRUE(st.ok) << st.message;
  for (auto& [en, d, c] : api.enabled) EXPECT_EQ(d, kDomainDriver) << c;
  for (uint32_t id : {307u, 442u, 652u, 653u, 477u, 478u}) EXPECT_TRUE(api.isEnabled(kDomainDriver, id)) << id;
  EXPECT_EQ(st.enabledLaunchCallbacks, 6);
  EXPECT_EQ(st.enabledCopyCallbacks, 16);
  EXPECT_NE(st.message.find("(driver API only)"), std::string::npos) << st.message;
  cap.stop();
}

TEST(GpuCapture, AnotherSubscriberTurnsCaptureOffWithTheReason) {
  if (!decoderAvailable()) GTEST_SKIP() << "built without CUPTI headers";
  FakeCuptiApi api;
  api.subscribeResult = kErrorMultipleSubscribers;
  api.otherSubscriber = "Nsight Systems";
  gpu::LaunchTracker tracker;
  GpuCapture cap(api, tracker);
  GpuCapture::Status st = cap.start();
  EXPECT_FALSE(st.ok);
  EXPECT_FALSE(cap.running());
  EXPECT_NE(st.message.find("another CUPTI subscriber is active (Nsight Systems)"), std::string::npos) << st.message;
  EXPECT_NE(st.message.find("CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, 39"), std::string::npos) << st.message;
  EXPECT_TRUE(api.enabled.empty());
}

TEST(GpuCapture, NoDriverOrNoLibraryOrAnOldCuptiSayWhy) {
  if (!decoderAvailable()) GTEST_SKIP() << "built without CUPTI headers";
  {
    FakeCuptiApi api;
    api.subscribeResult = kErrorUnknown;  // what cuptiSubscribe returns without a driver
    gpu::LaunchTracker tracker;
    GpuCapture::Status st = GpuCapture(api, tracker).start();
    EXPECT_FALSE(st.ok);
    EXPECT_NE(st.message.find("no usable NVIDIA driver"), std::string::npos) << st.message;
  }
  {
    FakeCuptiApi api;
    api.loadOk = false;
    gpu::LaunchTracker tracker;
    GpuCapture::Status st = GpuCapture(api, tracker).start();
    EXPECT_FALSE(st.ok);
    EXPECT_EQ(st.message, "cannot load CUPTI: libcupti.so: cannot open shared object file");
    EXPECT_EQ(api.subscribes, 0);
  }
  {
    FakeCuptiApi api;
    api.subscribeResult = kErrorInsufficientPrivileges;
    gpu::LaunchTracker tracker;
    GpuCapture::Status st = GpuCapture(api, tracker).start();
    EXPECT_NE(st.message.find("insufficient privileges"), std::string::npos) << st.message;
  }
  {
    // A CUPTI from before CUDA 13 does not know __cudaLaunchKernel: capture still starts.
    FakeCuptiApi api;
    api.unsupported = {{kDomainRuntime, 505}, {kDomainRuntime, 506}};
    gpu::LaunchTracker tracker;
    GpuCapture::Status st = GpuCapture(api, tracker).start();
    EXPECT_TRUE(st.ok) << st.message;
    ASSERT_EQ(st.notes.size(), 2u);
    EXPECT_NE(st.notes[0].find("runtime callback 505 unknown"), std::string::npos);
  }
  {
    // Any other enable failure: nothing half-subscribed is left behind.
    FakeCuptiApi api;
    api.enableResult = kErrorNotSupported;
    gpu::LaunchTracker tracker;
    GpuCapture cap(api, tracker);
    GpuCapture::Status st = cap.start();
    EXPECT_FALSE(st.ok);
    EXPECT_NE(st.message.find("cuptiEnableCallback"), std::string::npos) << st.message;
    EXPECT_EQ(api.unsubscribes, 1);
    EXPECT_FALSE(cap.running());
  }
}

#if DLRR_HAVE_CUPTI

CUpti_CallbackData cbdata(CUpti_ApiCallbackSite site, const void* params, const char* symbol, uint32_t corr,
                          void* ret = nullptr) {
  CUpti_CallbackData d{};
  d.callbackSite = site;
  d.functionName = "fn";
  d.functionParams = params;
  d.functionReturnValue = ret;
  d.symbolName = symbol;
  d.context = reinterpret_cast<CUcontext>(uintptr_t{0x1000});
  d.contextUid = 1;
  d.correlationId = corr;
  return d;
}

TEST(GpuCaptureDecode, RuntimeLaunchWithItsDriverLaunchBecomesOneRecord) {
  FakeCuptiApi api;
  api.device = 3;
  gpu::LaunchTracker tracker;
  GpuCapture cap(api, tracker);
  ASSERT_TRUE(cap.start().ok);
  tracker.beginStep(0);
  int hostStub = 0;
  cudaLaunchKernel_v7000_params rp{};
  rp.func = &hostStub;
  rp.gridDim = dim3(64, 2, 1);
  rp.blockDim = dim3(256, 1, 1);
  rp.sharedMem = 1024;
  rp.stream = reinterpret_cast<cudaStream_t>(uintptr_t{0x42});
  cuLaunchKernel_params dp{};
  dp.f = reinterpret_cast<CUfunction>(uintptr_t{0x9000});
  dp.gridDimX = 64, dp.gridDimY = 2, dp.gridDimZ = 1;
  dp.blockDimX = 256, dp.blockDimY = 1, dp.blockDimZ = 1;
  dp.sharedMemBytes = 1024;
  dp.hStream = reinterpret_cast<CUstream>(uintptr_t{0x42});
  const char* name = "_Z6kernelPfi";
  int ok = 0;
  auto renter = cbdata(CUPTI_API_ENTER, &rp, name, 10);
  auto denter = cbdata(CUPTI_API_ENTER, &dp, name, 11);
  auto dexit = cbdata(CUPTI_API_EXIT, &dp, name, 11, &ok);
  auto rexit = cbdata(CUPTI_API_EXIT, &rp, name, 10, &ok);
  api.fire(kDomainRuntime, cbid::cudaLaunchKernel_v7000, &renter);
  api.fire(kDomainDriver, cbid::cuLaunchKernel, &denter);
  api.fire(kDomainDriver, cbid::cuLaunchKernel, &dexit);
  api.fire(kDomainRuntime, cbid::cudaLaunchKernel_v7000, &rexit);
  Sink s;
  tracker.drain(s);
  ASSERT_EQ(s.launches.size(), 1u);
  const auto& e = s.launches[0];
  EXPECT_EQ(s.names[e.nameId], name);
  EXPECT_EQ(e.grid, (gpu::Dim3{64, 2, 1}));
  EXPECT_EQ(e.block, (gpu::Dim3{256, 1, 1}));
  EXPECT_EQ(e.sharedMem, 1024u);
  EXPECT_EQ(e.device, 3u);
  EXPECT_EQ(e.stream, 0x42u + 7);  // the fake's stream id for handle 0x42
  EXPECT_EQ(e.correlationId, 10u);
  // Context and stream lookups are cached per thread.
  EXPECT_EQ(api.deviceQueries, 1);
  EXPECT_EQ(api.streamQueries, 1);
  cap.stop();
}

TEST(GpuCaptureDecode, Nvcc13LaunchUsesTheMirroredLayout) {
  FakeCuptiApi api;
  gpu::LaunchTracker tracker;
  GpuCapture cap(api, tracker);
  ASSERT_TRUE(cap.start().ok);
  tracker.beginStep(0);
  struct {  // __cudaLaunchKernel(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t)
    const void* kernel;
    dim3 grid, block;
    void** args;
    size_t smem;
    cudaStream_t stream;
  } p{reinterpret_cast<const void*>(uintptr_t{0x77}), dim3(5, 6, 7), dim3(32, 2, 1), nullptr, 0, nullptr};
  int ok = 0;
  auto enter = cbdata(CUPTI_API_ENTER, &p, "_Z3foov", 20);
  auto exit = cbdata(CUPTI_API_EXIT, &p, "_Z3foov", 20, &ok);
  api.fire(kDomainRuntime, cbid::__cudaLaunchKernel_v13000, &enter);
  api.fire(kDomainRuntime, cbid::__cudaLaunchKernel_v13000, &exit);
  // cudaLaunchKernelExC with its config struct.
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(8, 1, 1);
  cfg.blockDim = dim3(64, 1, 1);
  cfg.dynamicSmemBytes = 512;
  cudaLaunchKernelExC_v11060_params xp{&cfg, reinterpret_cast<const void*>(uintptr_t{0x78}), nullptr};
  auto xenter = cbdata(CUPTI_API_ENTER, &xp, "_Z3barv", 21);
  auto xexit = cbdata(CUPTI_API_EXIT, &xp, "_Z3barv", 21, &ok);
  api.fire(kDomainRuntime, cbid::cudaLaunchKernelExC_v11060, &xenter);
  api.fire(kDomainRuntime, cbid::cudaLaunchKernelExC_v11060, &xexit);
  Sink s;
  tracker.drain(s);
  ASSERT_EQ(s.launches.size(), 2u);
  EXPECT_EQ(s.launches[0].grid, (gpu::Dim3{5, 6, 7}));
  EXPECT_EQ(s.launches[0].block, (gpu::Dim3{32, 2, 1}));
  EXPECT_TRUE(s.launches[0].flags & gpu::kFlagGeomMirrored);
  EXPECT_EQ(s.launches[1].grid, (gpu::Dim3{8, 1, 1}));
  EXPECT_EQ(s.launches[1].sharedMem, 512u);
  EXPECT_TRUE(s.launches[1].flags & gpu::kFlagGeomExact);
  cap.stop();
}

TEST(GpuCaptureDecode, CopiesAreDecodedAndHostToDeviceDigested) {
  FakeCuptiApi api;
  gpu::LaunchTracker tracker;
  GpuCapture cap(api, tracker);
  ASSERT_TRUE(cap.start().ok);
  tracker.beginStep(4);
  std::vector<float> batch(1000, 0.5f);
  cudaMemcpyAsync_v3020_params rp{reinterpret_cast<void*>(uintptr_t{0xd000}), batch.data(), batch.size() * 4,
                                  cudaMemcpyHostToDevice, nullptr};
  cuMemcpyHtoDAsync_v2_params dp{0xd000, batch.data(), batch.size() * 4, nullptr};
  int ok = 0;
  auto re = cbdata(CUPTI_API_ENTER, &rp, nullptr, 30);
  auto de = cbdata(CUPTI_API_ENTER, &dp, nullptr, 31);
  auto dx = cbdata(CUPTI_API_EXIT, &dp, nullptr, 31, &ok);
  auto rx = cbdata(CUPTI_API_EXIT, &rp, nullptr, 30, &ok);
  api.fire(kDomainRuntime, cbid::cudaMemcpyAsync_v3020, &re);
  api.fire(kDomainDriver, cbid::cuMemcpyHtoDAsync_v2, &de);
  api.fire(kDomainDriver, cbid::cuMemcpyHtoDAsync_v2, &dx);
  api.fire(kDomainRuntime, cbid::cudaMemcpyAsync_v3020, &rx);
  cuMemcpyDtoH_v2_params hp{batch.data(), 0xd000, 16};
  auto he = cbdata(CUPTI_API_ENTER, &hp, nullptr, 32);
  auto hx = cbdata(CUPTI_API_EXIT, &hp, nullptr, 32, &ok);
  api.fire(kDomainDriver, cbid::cuMemcpyDtoH_v2, &he);
  api.fire(kDomainDriver, cbid::cuMemcpyDtoH_v2, &hx);
  Sink s;
  tracker.drain(s);
  ASSERT_EQ(s.copies.size(), 2u);
  EXPECT_EQ(s.copies[0].step, 4);
  EXPECT_EQ(s.copies[0].direction, gpu::CopyDirection::HostToDevice);
  EXPECT_EQ(s.copies[0].bytes, 4000u);
  EXPECT_EQ(s.copies[0].digest, hash64(batch.data(), 4000));
  EXPECT_EQ(s.copies[1].direction, gpu::CopyDirection::DeviceToHost);
  EXPECT_EQ(s.copies[1].bytes, 16u);
  EXPECT_EQ(s.copies[1].digest, 0u);
  EXPECT_TRUE(s.launches.empty());
  cap.stop();
}

TEST(GpuCaptureDecode, OtherDomainsAndUnknownIdsAreIgnored) {
  FakeCuptiApi api;
  gpu::LaunchTracker tracker;
  GpuCapture cap(api, tracker);
  ASSERT_TRUE(cap.start().ok);
  tracker.beginStep(0);
  auto d = cbdata(CUPTI_API_ENTER, nullptr, nullptr, 1);
  api.fire(CUPTI_CB_DOMAIN_RESOURCE, 1, &d);
  api.fire(kDomainDriver, 1 /* cuInit */, &d);
  auto x = cbdata(CUPTI_API_EXIT, nullptr, nullptr, 1);
  api.fire(kDomainDriver, 1, &x);
  api.fire(kDomainRuntime, cbid::cudaLaunchKernel_v7000, nullptr);
  Sink s;
  EXPECT_EQ(tracker.drain(s), 0u);
  cap.stop();
}

#endif  // DLRR_HAVE_CUPTI

// The real CUPTI on this machine. Without a driver (CI) it must refuse cleanly with a reason;
// on a GPU machine it starts.
TEST(GpuCaptureReal, RealCuptiStartsOrSaysWhyNot) {
  if (!decoderAvailable()) GTEST_SKIP() << "built without CUPTI headers";
  auto api = makeCuptiApi();
  std::string why;
  if (!api->load(why)) GTEST_SKIP() << "no libcupti here: " << why;
  gpu::LaunchTracker tracker;
  GpuCapture cap(*api, tracker);
  GpuCapture::Status st = cap.start();
  if (st.ok) {
    cap.stop();
    SUCCEED() << "GPU capture started: " << st.message;
  } else {
    EXPECT_FALSE(st.message.empty());
    std::printf("real CUPTI (%s): GPU capture off: %s\n", api->libraryPath().c_str(), st.message.c_str());
  }
}

}  // namespace
}  // namespace dlrr::cupti
