#include "interpose/cupti/GpuCapture.h"

#include "interpose/cupti/CuptiDecode.h"
#include "interpose/cupti/CuptiIds.h"

namespace dlrr::cupti {

void GpuCapture::callback(void* userdata, uint32_t domain, uint32_t cbid, const void* cbdata) {
  auto* self = static_cast<GpuCapture*>(userdata);
  decodeCallback(self->api_, self->tracker_, domain, cbid, cbdata);
}

std::string GpuCapture::explain(CuptiApi& api, Result r, const std::string& other) {
  std::string code = std::string(api.resultString(r)) + ", " + std::to_string(r);
  switch (r) {
    case kErrorMultipleSubscribers:
      return "another CUPTI subscriber is active" + (other.empty() ? std::string() : " (" + other + ")") +
             ": a profiler or debugger (Nsight Systems/Compute, torch.profiler/Kineto, cuda-gdb, DCGM) owns the "
             "one CUPTI subscription of this process (" +
             code + ")";
    case kErrorUnknown:
    case kErrorNotInitialized:
    case kErrorInvalidContext:
      return "CUPTI cannot initialise: no usable NVIDIA driver or GPU (" + code + ")";
    case kErrorInsufficientPrivileges:
      return "insufficient privileges for CUPTI (see https://developer.nvidia.com/ERR_NVGPUCTRPERM) (" + code + ")";
    case kErrorNotCompatible:
    case kErrorCudaCompilerNotCompatible:
      return "this CUPTI does not match the driver (driver older than CUPTI " +
             [&] {
               uint32_t v = 0;
               return api.getVersion(v) == kSuccess ? "API " + std::to_string(v) : std::string("?");
             }() +
             "?) (" + code + ")";
    case kErrorVirtualizedDeviceNotSupported:
      return "CUPTI is not supported on this virtualized GPU (" + code + ")";
    case kErrorMigDeviceNotSupported:
      return "CUPTI callbacks are not supported on this MIG device (" + code + ")";
    case kErrorConfidentialComputing:
      return "CUPTI is disabled in confidential computing mode (" + code + ")";
    case kErrorNotSupported:
      return "CUPTI is not supported here (" + code + ")";
    default:
      return "cuptiSubscribe failed (" + code + ")";
  }
}

GpuCapture::Status GpuCapture::start(bool runtimeApi) {
  Status st;
  if (subscribed_) {
    st.ok = true;
    st.message = "already running";
    return st;
  }
  if (!decoderAvailable()) {
    st.message = "dlrr was built without the CUDA toolkit's CUPTI headers";
    return st;
  }
  std::string why;
  if (!api_.load(why)) {
    st.message = "cannot load CUPTI: " + why;
    return st;
  }
  std::string other;
  Result r = api_.subscribe(subscriber_, &GpuCapture::callback, this, other);
  if (r != kSuccess) {
    st.message = explain(api_, r, other);
    return st;
  }
  subscribed_ = true;
  auto enable = [&](uint32_t domain, const uint32_t* ids, size_t n, int& count) -> bool {
    for (size_t i = 0; i < n; ++i) {
      Result e = api_.enableCallback(true, subscriber_, domain, ids[i]);
      if (e == kSuccess) {
        ++count;
      } else if (e == kErrorInvalidParameter) {
        // An id this CUPTI does not know (e.g. __cudaLaunchKernel before CUDA 13): nothing
        // can call it either.
        st.notes.push_back((domain == kDomainDriver ? "driver" : "runtime") + std::string(" callback ") +
                           std::to_string(ids[i]) + " unknown to this CUPTI");
      } else {
        st.message = "cuptiEnableCallback(" + std::to_string(domain) + ", " + std::to_string(ids[i]) + ") failed (" +
                     api_.resultString(e) + ", " + std::to_string(e) + ")";
        return false;
      }
    }
    return true;
  };
  auto count = [](const auto& a) { return sizeof(a) / sizeof(a[0]); };
  bool ok = (!runtimeApi || enable(kDomainRuntime, cbid::kRuntimeLaunches, count(cbid::kRuntimeLaunches),
                                   st.enabledLaunchCallbacks)) &&
            enable(kDomainDriver, cbid::kDriverLaunches, count(cbid::kDriverLaunches), st.enabledLaunchCallbacks) &&
            (!runtimeApi ||
             enable(kDomainRuntime, cbid::kRuntimeCopies, count(cbid::kRuntimeCopies), st.enabledCopyCallbacks)) &&
            enable(kDomainDriver, cbid::kDriverCopies, count(cbid::kDriverCopies), st.enabledCopyCallbacks);
  if (ok && st.enabledLaunchCallbacks == 0) {
    ok = false;
    st.message = "no kernel-launch callback could be enabled";
  }
  if (!ok) {
    stop();
    return st;
  }
  uint32_t version = 0;
  std::string v = api_.getVersion(version) == kSuccess ? " API " + std::to_string(version) : std::string();
  st.ok = true;
  st.message = "CUPTI" + v + " (" + api_.libraryPath() + "), " +
               std::to_string(st.enabledLaunchCallbacks + st.enabledCopyCallbacks) + " callbacks" +
               (runtimeApi ? "" : " (driver API only)");
  return st;
}

void GpuCapture::stop() {
  if (!subscribed_) return;
  api_.unsubscribe(subscriber_);
  subscribed_ = false;
  subscriber_ = nullptr;
}

}  // namespace dlrr::cupti
