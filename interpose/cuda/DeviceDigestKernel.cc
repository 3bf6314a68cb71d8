#include "interpose/cuda/DeviceDigestKernel.h"

#include <dlfcn.h>

#include <algorithm>

namespace dlrr::cuda {

#if DLRR_HAVE_DIGEST_KERNEL
extern const unsigned char kDigestKernelImage[];
#endif

namespace {
constexpr int kAttributeMultiprocessors = 16;  // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
constexpr char kKernelName[] = "dlrr_digest_kernel";

template <typename F>
bool bind(void* lib, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  return out != nullptr;
}
}  // namespace

std::unique_ptr<DeviceDigestKernel> DeviceDigestKernel::open(std::string& why) {
#if DLRR_HAVE_DIGEST_KERNEL
  // RTLD_NOLOAD: only the driver the job loaded (torch's CUDA initialisation); the handle's
  // reference is never dropped, as the driver is never unloaded while the job runs.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!lib) {
    why = "no CUDA driver in this process (libcuda.so.1 is not loaded)";
    return nullptr;
  }
  Driver d;
  if (!bind(lib, "cuCtxGetCurrent", d.ctxGetCurrent) || !bind(lib, "cuCtxGetDevice", d.ctxGetDevice) ||
      !bind(lib, "cuDeviceGetAttribute", d.deviceGetAttribute) || !bind(lib, "cuModuleLoadData", d.moduleLoadData) ||
      !bind(lib, "cuModuleGetFunction", d.moduleGetFunction) || !bind(lib, "cuLaunchKernel", d.launchKernel)) {
    why = "the loaded libcuda.so.1 lacks a driver API entry point the digest kernel needs";
    return nullptr;
  }
  return std::make_unique<DeviceDigestKernel>(d, kDigestKernelImage);
#else
  why = "dlrr was built without nvcc: no device digest kernel";
  return nullptr;
#endif
}

DeviceDigestKernel::DeviceDigestKernel(const Driver& driver, const void* image) : d_(driver), image_(image) {}

unsigned DeviceDigestKernel::blocksFor(uint64_t work, int multiprocessors) {
  // Each thread takes several items (grid-stride): 8 per thread before another block is worth it.
  uint64_t wanted = (work + kThreads * 8 - 1) / (kThreads * 8);
  uint64_t most = static_cast<uint64_t>(std::max(multiprocessors, 1)) * 8;
  return static_cast<unsigned>(std::clamp<uint64_t>(wanted, 1, most));
}

int DeviceDigestKernel::contextsLoaded() const {
  std::lock_guard<std::mutex> lk(mu_);
  return static_cast<int>(loaded_.size());
}

int DeviceDigestKernel::load(void* context, Loaded& out) {
  // The module is loaded once a context and stays as long as the context (never unloaded: the
  // job may destroy the context first, and unloading after that is an error).
  void* module = nullptr;
  void* function = nullptr;
  int device = 0, sms = 1;
  if (int rc = d_.moduleLoadData(&module, image_)) return rc;
  if (int rc = d_.moduleGetFunction(&function, module, kKernelName)) return rc;
  if (d_.ctxGetDevice(&device) || d_.deviceGetAttribute(&sms, kAttributeMultiprocessors, device)) sms = 1;
  out = Loaded{context, function, sms};
  loaded_.push_back(out);
  return 0;
}

int DeviceDigestKernel::launch(const void* data, uint64_t nbytes, uint64_t numel, int element, void* out,
                               void* stream) {
  void* context = nullptr;
  if (int rc = d_.ctxGetCurrent(&context)) return rc;
  if (!context) return kErrorNoContext;
  Loaded k{};
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = std::find_if(loaded_.begin(), loaded_.end(), [&](const Loaded& l) { return l.context == context; });
    if (it != loaded_.end()) {
      k = *it;
    } else if (int rc = load(context, k)) {
      return rc;
    }
  }
  uint64_t words = (nbytes + 3) / 4;
  unsigned blocks = blocksFor(std::max(words, numel), k.multiprocessors);
  void* params[] = {static_cast<void*>(&data), &nbytes, &numel, &element, static_cast<void*>(&out)};
  return d_.launchKernel(k.function, blocks, 1, 1, kThreads, 1, 1, 0, stream, params, nullptr);
}

}  // namespace dlrr::cuda
