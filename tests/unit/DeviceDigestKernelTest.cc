// The device digest kernel's host side with a fake driver: one module load a context, the
// launch's arguments and geometry, errors passed through. The kernel itself runs on a GPU only
// (tests/python/test_gpu.py's CUDA test, scripts/gpu_check.sh).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

#include "interpose/cuda/DeviceDigestKernel.h"

namespace dlrr::cuda {
namespace {

// The fake driver's state: a test-only global, as a C function pointer carries no context.
struct FakeDriver {
  void* current = nullptr;
  int loads = 0, launches = 0, loadResult = 0, launchResult = 0;
  const void* image = nullptr;
  unsigned grid = 0, block = 0;
  void* stream = nullptr;
  // The launch's arguments, copied at the call (params points into the launcher's frame).
  const void* data = nullptr;
  uint64_t nbytes = 0, numel = 0;
  int element = -1;
  void* out = nullptr;
};
FakeDriver gFake;
int gModule, gFunction;

DeviceDigestKernel::Driver fakeDriver() {
  DeviceDigestKernel::Driver d;
  d.ctxGetCurrent = [](void** c) {
    *c = gFake.current;
    return 0;
  };
  d.ctxGetDevice = [](int* dev) {
    *dev = 0;
    return 0;
  };
  d.deviceGetAttribute = [](int* v, int attribute, int) {
    *v = attribute == 16 ? 132 : 0;
    return 0;
  };
  d.moduleLoadData = [](void** m, const void* image) {
    ++gFake.loads;
    gFake.image = image;
    *m = &gModule;
    return gFake.loadResult;
  };
  d.moduleGetFunction = [](void** f, void* m, const char* name) {
    *f = (m == &gModule && std::string(name) == "dlrr_digest_kernel") ? &gFunction : nullptr;
    return *f ? 0 : 500;  // CUDA_ERROR_NOT_FOUND
  };
  d.launchKernel = [](void* f, unsigned gx, unsigned, unsigned, unsigned bx, unsigned, unsigned, unsigned, void* stream,
                      void** params, void**) {
    EXPECT_EQ(f, &gFunction);
    ++gFake.launches;
    gFake.grid = gx;
    gFake.block = bx;
    gFake.stream = stream;
    gFake.data = *static_cast<const void**>(params[0]);
    gFake.nbytes = *static_cast<uint64_t*>(params[1]);
    gFake.numel = *static_cast<uint64_t*>(params[2]);
    gFake.element = *static_cast<int*>(params[3]);
    gFake.out = *static_cast<void**>(params[4]);
    return gFake.launchResult;
  };
  return d;
}

TEST(DeviceDigestKernel, LoadsOnceAContextAndPassesTheArguments) {
  gFake = FakeDriver{};
  const char image[] = "fatbin";
  DeviceDigestKernel k(fakeDriver(), image);
  int ctxA = 0, ctxB = 0, data = 0, out = 0, stream = 0;
  gFake.current = &ctxA;
  ASSERT_EQ(k.launch(&data, 4000, 1000, 1, &out, &stream), 0);
  ASSERT_EQ(k.launch(&data, 4000, 1000, 1, &out, &stream), 0);
  EXPECT_EQ(gFake.loads, 1);
  EXPECT_EQ(gFake.image, image);
  gFake.current = &ctxB;  // another device's context: its own module
  ASSERT_EQ(k.launch(&data, 6, 3, 3, &out, nullptr), 0);
  EXPECT_EQ(gFake.loads, 2);
  EXPECT_EQ(k.contextsLoaded(), 2);
  EXPECT_EQ(gFake.launches, 3);
  EXPECT_EQ(gFake.block, DeviceDigestKernel::kThreads);
  EXPECT_EQ(gFake.grid, 1u);
  EXPECT_EQ(gFake.stream, nullptr);
  EXPECT_EQ(gFake.data, &data);
  EXPECT_EQ(gFake.nbytes, 6u);
  EXPECT_EQ(gFake.numel, 3u);
  EXPECT_EQ(gFake.element, 3);
  EXPECT_EQ(gFake.out, &out);
}

TEST(DeviceDigestKernel, ErrorsAreReturnedNotThrown) {
  gFake = FakeDriver{};
  DeviceDigestKernel k(fakeDriver(), "x");
  int data = 0, out = 0;
  EXPECT_EQ(k.launch(&data, 4, 1, 1, &out, nullptr), DeviceDigestKernel::kErrorNoContext);  // no current context
  int ctx = 0;
  gFake.current = &ctx;
  gFake.loadResult = 209;  // CUDA_ERROR_NO_BINARY_FOR_GPU
  EXPECT_EQ(k.launch(&data, 4, 1, 1, &out, nullptr), 209);
  EXPECT_EQ(k.contextsLoaded(), 0);  // tried again next time
  gFake.loadResult = 0;
  gFake.launchResult = 1;
  EXPECT_EQ(k.launch(&data, 4, 1, 1, &out, nullptr), 1);
  EXPECT_EQ(k.contextsLoaded(), 1);
}

TEST(DeviceDigestKernel, BlocksFillTheDeviceButNoMoreThanTheWork) {
  EXPECT_EQ(DeviceDigestKernel::blocksFor(0, 132), 1u);
  EXPECT_EQ(DeviceDigestKernel::blocksFor(1, 132), 1u);
  EXPECT_EQ(DeviceDigestKernel::blocksFor(256 * 8, 132), 1u);
  EXPECT_EQ(DeviceDigestKernel::blocksFor(256 * 8 + 1, 132), 2u);
  EXPECT_EQ(DeviceDigestKernel::blocksFor(uint64_t{1} << 32, 132), 132u * 8);
  EXPECT_EQ(DeviceDigestKernel::blocksFor(uint64_t{1} << 32, 0), 8u);
}

TEST(DeviceDigestKernel, OpenSaysWhyWithoutADriver) {
  if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD)) GTEST_SKIP() << "a CUDA driver is loaded in this process";
  std::string why;
  EXPECT_EQ(DeviceDigestKernel::open(why), nullptr);
  EXPECT_FALSE(why.empty());
  EXPECT_TRUE(why.find("no CUDA driver") != std::string::npos || why.find("without nvcc") != std::string::npos) << why;
}

}  // namespace
}  // namespace dlrr::cuda
