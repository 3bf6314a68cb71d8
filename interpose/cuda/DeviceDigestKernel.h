#pragma once
// The device digest in one kernel a tensor (DigestKernel.cu; docs/gpu.md "Digests of CUDA
// tensors"). The kernel's fatbin is embedded in libdlrr and loaded into each CUDA context the
// job digests in, through the driver API of the libcuda the process has already loaded (never
// loaded here: a process without CUDA stays without it). The hook owns one instance
// (dlrr_digest_kernel_open/close): no process-wide state.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dlrr::cuda {

// What the kernel reads elements as, for the NaN/Inf counts and the min/max (the sums read
// 32-bit words whatever the type). As DigestKernel.cu's enum and gpu.py's _FUSED_ELEMENTS.
enum class DigestElement : int { None = 0, F32, F64, F16, BF16, I64, I32, I16, I8, U8 };

class DeviceDigestKernel {
 public:
  // The driver API entry points used, as libcuda exports them (CUresult is an int; handles are
  // opaque pointers; CUdevice is an int).
  struct Driver {
    int (*ctxGetCurrent)(void** ctx) = nullptr;
    int (*ctxGetDevice)(int* device) = nullptr;
    int (*deviceGetAttribute)(int* value, int attribute, int device) = nullptr;
    int (*moduleLoadData)(void** module, const void* image) = nullptr;
    int (*moduleGetFunction)(void** function, void* module, const char* name) = nullptr;
    int (*launchKernel)(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned sharedBytes, void* stream, void** params, void** extra) = nullptr;
  };
  static constexpr unsigned kThreads = 256;
  static constexpr int kErrorNoContext = 201;  // CUDA_ERROR_INVALID_CONTEXT: no current context

  // nullptr, with why set, where no libcuda is loaded in this process or dlrr was built without
  // the kernel (no nvcc).
  static std::unique_ptr<DeviceDigestKernel> open(std::string& why);
  // With given entry points and image (tests).
  DeviceDigestKernel(const Driver& driver, const void* image);

  // Enqueues the digest of the `nbytes` at `data` (device memory of the calling thread's current
  // context; `numel` elements of `element`) into out[0..5] (device memory, set beforehand to
  // 0,0,0,0,~0,0) on `stream`. 0, or the CUresult that failed. Never synchronises.
  int launch(const void* data, uint64_t nbytes, uint64_t numel, int element, void* out, void* stream);

  // Blocks for `work` items: enough to fill the device, no more than the work needs.
  static unsigned blocksFor(uint64_t work, int multiprocessors);
  int contextsLoaded() const;

 private:
  struct Loaded {
    void* context;
    void* function;
    int multiprocessors;
  };
  int load(void* context, Loaded& out);

  Driver d_;
  const void* image_;
  mutable std::mutex mu_;  // loaded_: the hook's threads may digest at once
  std::vector<Loaded> loaded_;
};

}  // namespace dlrr::cuda
