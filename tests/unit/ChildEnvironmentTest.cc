// The recorded job's environment (issue 14: dlrecord split into phases).
#include <gtest/gtest.h>

#include <algorithm>

#include "tools/dlrecord/ChildEnvironment.h"

namespace dlrr {
namespace {

// A function's static: an exception while it is made fails the test, not the binary's start.
const InstallPaths& paths() {
  static const InstallPaths v{"/opt/dlrr/lib/dlrr/libdlrr.so", "/opt/dlrr/lib/dlrr/python"};
  return v;
}

bool has(const std::vector<std::string>& env, const std::string& kv) {
  return std::find(env.begin(), env.end(), kv) != env.end();
}
size_t count(const std::vector<std::string>& env, const std::string& key) {
  return std::count_if(env.begin(), env.end(), [&](const std::string& kv) { return kv.rfind(key + "=", 0) == 0; });
}

TEST(ChildEnvironment, OursWithDlrrFirstAndItsSettings) {
  RecordOptions o;
  o.capture = "full";
  o.ringSteps = 4;
  std::string gpuOff = "stale";
  auto env = childEnvironment({"HOME=/root", "LD_PRELOAD=/usr/lib/libjemalloc.so", "PYTHONPATH=", "DLRR_MODE=replay",
                               "DLRR_STATUS_FD=9:1", "A=b=c"},
                              o, "/t/run.trace", paths(), "5:77", gpuOff);
  EXPECT_TRUE(gpuOff.empty());
  EXPECT_TRUE(has(env, "HOME=/root"));
  EXPECT_TRUE(has(env, "A=b=c"));
  EXPECT_TRUE(has(env, "LD_PRELOAD=" + paths().library + ":/usr/lib/libjemalloc.so"));
  EXPECT_TRUE(has(env, "PYTHONPATH=" + paths().pythonHook));  // an empty value adds no ":"
  EXPECT_TRUE(has(env, "DLRR_MODE=record"));                  // an outer dlrr's setting is not inherited
  EXPECT_EQ(count(env, "DLRR_MODE"), 1u);
  EXPECT_TRUE(has(env, "DLRR_TRACE=/t/run.trace"));
  EXPECT_TRUE(has(env, "DLRR_CAPTURE=full"));
  EXPECT_TRUE(has(env, "DLRR_RING_STEPS=4"));
  EXPECT_TRUE(has(env, "DLRR_STATUS_FD=5:77"));
  EXPECT_EQ(count(env, "DLRR_STATUS_FD"), 1u);
  EXPECT_TRUE(has(env, "CUDA_INJECTION64_PATH=" + paths().library));
}

TEST(ChildEnvironment, NoStatusPipeNoVariable) {
  std::string gpuOff;
  auto env = childEnvironment({"DLRR_STATUS_FD=9:1"}, RecordOptions{}, "/t", paths(), "", gpuOff);
  EXPECT_EQ(count(env, "DLRR_STATUS_FD"), 0u);
}

TEST(ChildEnvironment, AUsersCudaInjectionLibraryIsKeptAndGpuCaptureSaidOff) {
  std::string gpuOff;
  auto env =
      childEnvironment({"CUDA_INJECTION64_PATH=/opt/nsight/libinject.so"}, RecordOptions{}, "/t", paths(), "", gpuOff);
  EXPECT_TRUE(has(env, "CUDA_INJECTION64_PATH=/opt/nsight/libinject.so"));
  EXPECT_EQ(count(env, "CUDA_INJECTION64_PATH"), 1u);
  EXPECT_NE(gpuOff.find("another injection library"), std::string::npos);

  env = childEnvironment({"CUDA_INJECTION64_PATH=" + paths().library}, RecordOptions{}, "/t", paths(), "", gpuOff);
  EXPECT_TRUE(gpuOff.empty());  // ours already: capture on
  EXPECT_EQ(count(env, "CUDA_INJECTION64_PATH"), 1u);
  env = childEnvironment({"CUDA_INJECTION64_PATH="}, RecordOptions{}, "/t", paths(), "", gpuOff);
  EXPECT_TRUE(gpuOff.empty());
  EXPECT_TRUE(has(env, "CUDA_INJECTION64_PATH=" + paths().library));
  EXPECT_EQ(count(env, "CUDA_INJECTION64_PATH"), 1u);
}

}  // namespace
}  // namespace dlrr
