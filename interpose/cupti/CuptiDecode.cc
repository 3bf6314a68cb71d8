#include "interpose/cupti/CuptiDecode.h"

#include "interpose/cupti/CuptiIds.h"

#if DLRR_HAVE_CUPTI
#include <cupti.h>
#endif

namespace dlrr::cupti {

#if !DLRR_HAVE_CUPTI

bool decoderAvailable() noexcept { return false; }
void decodeCallback(CuptiApi&, gpu::LaunchTracker&, uint32_t, uint32_t, const void*) noexcept {}

#else

namespace {

// Our ids are CUPTI's.
#define DLRR_CHECK_DRIVER(n) static_assert(cbid::n == CUPTI_DRIVER_TRACE_CBID_##n, #n);
#define DLRR_CHECK_RUNTIME(n) static_assert(cbid::n == CUPTI_RUNTIME_TRACE_CBID_##n, #n);
DLRR_CHECK_DRIVER(cuLaunchKernel)
DLRR_CHECK_DRIVER(cuLaunchKernel_ptsz)
DLRR_CHECK_DRIVER(cuLaunchCooperativeKernel)
DLRR_CHECK_DRIVER(cuLaunchCooperativeKernel_ptsz)
DLRR_CHECK_DRIVER(cuLaunchKernelEx)
DLRR_CHECK_DRIVER(cuLaunchKernelEx_ptsz)
DLRR_CHECK_DRIVER(cuMemcpyHtoD_v2)
DLRR_CHECK_DRIVER(cuMemcpyHtoDAsync_v2)
DLRR_CHECK_DRIVER(cuMemcpyDtoH_v2)
DLRR_CHECK_DRIVER(cuMemcpyDtoHAsync_v2)
DLRR_CHECK_DRIVER(cuMemcpyDtoD_v2)
DLRR_CHECK_DRIVER(cuMemcpyDtoDAsync_v2)
DLRR_CHECK_DRIVER(cuMemcpy)
DLRR_CHECK_DRIVER(cuMemcpyAsync)
DLRR_CHECK_DRIVER(cuMemcpyHtoD_v2_ptds)
DLRR_CHECK_DRIVER(cuMemcpyDtoH_v2_ptds)
DLRR_CHECK_DRIVER(cuMemcpyDtoD_v2_ptds)
DLRR_CHECK_DRIVER(cuMemcpy_ptds)
DLRR_CHECK_DRIVER(cuMemcpyAsync_ptsz)
DLRR_CHECK_DRIVER(cuMemcpyHtoDAsync_v2_ptsz)
DLRR_CHECK_DRIVER(cuMemcpyDtoHAsync_v2_ptsz)
DLRR_CHECK_DRIVER(cuMemcpyDtoDAsync_v2_ptsz)
DLRR_CHECK_RUNTIME(cudaLaunchKernel_v7000)
DLRR_CHECK_RUNTIME(cudaLaunchKernel_ptsz_v7000)
DLRR_CHECK_RUNTIME(cudaLaunchCooperativeKernel_v9000)
DLRR_CHECK_RUNTIME(cudaLaunchCooperativeKernel_ptsz_v9000)
DLRR_CHECK_RUNTIME(cudaLaunchKernelExC_v11060)
DLRR_CHECK_RUNTIME(cudaLaunchKernelExC_ptsz_v11060)
DLRR_CHECK_RUNTIME(__cudaLaunchKernel_v13000)
DLRR_CHECK_RUNTIME(__cudaLaunchKernel_ptsz_v13000)
DLRR_CHECK_RUNTIME(cudaMemcpy_v3020)
DLRR_CHECK_RUNTIME(cudaMemcpyAsync_v3020)
DLRR_CHECK_RUNTIME(cudaMemcpy_ptds_v7000)
DLRR_CHECK_RUNTIME(cudaMemcpyAsync_ptsz_v7000)
#undef DLRR_CHECK_DRIVER
#undef DLRR_CHECK_RUNTIME
static_assert(kDomainDriver == CUPTI_CB_DOMAIN_DRIVER_API && kDomainRuntime == CUPTI_CB_DOMAIN_RUNTIME_API);
static_assert(kErrorMultipleSubscribers == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
static_assert(kErrorUnknown == CUPTI_ERROR_UNKNOWN &&
              kErrorInsufficientPrivileges == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES);
static_assert(kErrorNotInitialized == CUPTI_ERROR_NOT_INITIALIZED && kErrorNotCompatible == CUPTI_ERROR_NOT_COMPATIBLE);
static_assert(kErrorInvalidParameter == CUPTI_ERROR_INVALID_PARAMETER &&
              kErrorNotSupported == CUPTI_ERROR_NOT_SUPPORTED);
static_assert(kErrorVirtualizedDeviceNotSupported == CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED);
static_assert(kErrorCudaCompilerNotCompatible == CUPTI_ERROR_CUDA_COMPILER_NOT_COMPATIBLE);
static_assert(kErrorConfidentialComputing == CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED);
static_assert(kErrorMigDeviceNotSupported == CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED);
static_assert(kErrorInvalidContext == CUPTI_ERROR_INVALID_CONTEXT);

// __cudaLaunchKernel(cudaKernel_t, dim3 grid, dim3 block, void** args, size_t smem, cudaStream_t)
// has no params struct in the CUDA 13.0 headers (crt/device_functions.h declares the
// function); CUPTI's params structs list the arguments in order, so we mirror that layout.
// It is the layout of cudaLaunchKernel_v7000_params with a cudaKernel_t in place of func.
struct LaunchKernelV13Params {
  const void* kernel;
  dim3 gridDim;
  dim3 blockDim;
  void** args;
  size_t sharedMem;
  cudaStream_t stream;
};
static_assert(sizeof(LaunchKernelV13Params) == sizeof(cudaLaunchKernel_v7000_params));
static_assert(offsetof(LaunchKernelV13Params, stream) == offsetof(cudaLaunchKernel_v7000_params, stream));
// The per-thread-stream variants take the same arguments.
static_assert(sizeof(cuLaunchKernel_ptsz_params) == sizeof(cuLaunchKernel_params));
static_assert(sizeof(cuLaunchKernelEx_ptsz_params) == sizeof(cuLaunchKernelEx_params));
static_assert(sizeof(cuLaunchCooperativeKernel_ptsz_params) == sizeof(cuLaunchCooperativeKernel_params));
static_assert(sizeof(cudaLaunchKernel_ptsz_v7000_params) == sizeof(cudaLaunchKernel_v7000_params));
static_assert(sizeof(cudaLaunchKernelExC_ptsz_v11060_params) == sizeof(cudaLaunchKernelExC_v11060_params));
static_assert(sizeof(cudaMemcpyAsync_ptsz_v7000_params) == sizeof(cudaMemcpyAsync_v3020_params));
static_assert(sizeof(cudaMemcpy_ptds_v7000_params) == sizeof(cudaMemcpy_v3020_params));
static_assert(sizeof(cuMemcpyHtoDAsync_v2_ptsz_params) == sizeof(cuMemcpyHtoDAsync_v2_params));
static_assert(sizeof(cuMemcpyAsync_ptsz_params) == sizeof(cuMemcpyAsync_params));

// Per-thread, one entry each: a thread launches into one context and mostly one stream.
// Context UIDs are never reused within a process; the api pointer keeps test instances apart.
struct DeviceCache {
  const CuptiApi* api;
  uint32_t contextUid;
  uint32_t device;
};
struct StreamCache {
  const CuptiApi* api;
  uint32_t contextUid;
  const void* handle;
  uint64_t id;
};
__attribute__((tls_model("initial-exec"))) thread_local DeviceCache tDevice{nullptr, 0, 0};
__attribute__((tls_model("initial-exec"))) thread_local StreamCache tStream{nullptr, 0, nullptr, 0};

uint32_t deviceOf(CuptiApi& api, const CUpti_CallbackData* d) noexcept {
  if (!d->context) return gpu::kUnknownDevice;
  if (tDevice.api == &api && tDevice.contextUid == d->contextUid) [[likely]]
    return tDevice.device;
  uint32_t dev = gpu::kUnknownDevice;
  if (api.deviceId(d->context, dev) != kSuccess) return gpu::kUnknownDevice;
  tDevice = {&api, d->contextUid, dev};
  return dev;
}

// CUPTI's stream id when it can tell (comparable across runs), else the handle.
uint64_t streamOf(CuptiApi& api, const CUpti_CallbackData* d, const void* handle) noexcept {
  if (!d->context) return reinterpret_cast<uintptr_t>(handle);
  if (tStream.api == &api && tStream.contextUid == d->contextUid && tStream.handle == handle) [[likely]]
    return tStream.id;
  uint32_t id = 0;
  uint64_t v =
      api.streamId(d->context, const_cast<void*>(handle), id) == kSuccess ? id : reinterpret_cast<uintptr_t>(handle);
  tStream = {&api, d->contextUid, handle, v};
  return v;
}

gpu::CopyDirection runtimeDirection(cudaMemcpyKind k) noexcept {
  switch (k) {
    case cudaMemcpyHostToDevice:
      return gpu::CopyDirection::HostToDevice;
    case cudaMemcpyDeviceToHost:
      return gpu::CopyDirection::DeviceToHost;
    case cudaMemcpyDeviceToDevice:
      return gpu::CopyDirection::DeviceToDevice;
    default:
      return gpu::CopyDirection::Other;  // host-to-host, default (unified addressing)
  }
}

template <typename P>
void driverGeometry(gpu::ApiCall& c, const P* p) noexcept {
  c.function = p->f;
  c.grid = {p->gridDimX, p->gridDimY, p->gridDimZ};
  c.block = {p->blockDimX, p->blockDimY, p->blockDimZ};
  c.sharedMem = p->sharedMemBytes;
  c.stream = reinterpret_cast<uintptr_t>(p->hStream);
  c.geometry = gpu::Geometry::Exact;
}

template <typename P>
void runtimeGeometry(gpu::ApiCall& c, const P* p, gpu::Geometry g) noexcept {
  c.grid = {p->gridDim.x, p->gridDim.y, p->gridDim.z};
  c.block = {p->blockDim.x, p->blockDim.y, p->blockDim.z};
  c.sharedMem = static_cast<uint32_t>(p->sharedMem);
  c.stream = reinterpret_cast<uintptr_t>(p->stream);
  c.geometry = g;
}

// Fills c from the enter-site parameters; false when cbid is not one of ours.
bool decodeEnter(gpu::ApiCall& c, uint32_t domain, uint32_t id, const void* params,
                 const void*& streamHandle) noexcept {
  if (domain == kDomainDriver) {
    switch (id) {
      case cbid::cuLaunchKernel:
      case cbid::cuLaunchKernel_ptsz:
        if (params) driverGeometry(c, static_cast<const cuLaunchKernel_params*>(params));
        return true;
      case cbid::cuLaunchCooperativeKernel:
      case cbid::cuLaunchCooperativeKernel_ptsz:
        if (params) driverGeometry(c, static_cast<const cuLaunchCooperativeKernel_params*>(params));
        return true;
      case cbid::cuLaunchKernelEx:
      case cbid::cuLaunchKernelEx_ptsz: {
        auto* p = static_cast<const cuLaunchKernelEx_params*>(params);
        if (p) {
          c.function = p->f;
          if (const CUlaunchConfig* cfg = p->config) {
            c.grid = {cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ};
            c.block = {cfg->blockDimX, cfg->blockDimY, cfg->blockDimZ};
            c.sharedMem = cfg->sharedMemBytes;
            c.stream = reinterpret_cast<uintptr_t>(cfg->hStream);
            c.geometry = gpu::Geometry::Exact;
          }
        }
        return true;
      }
      default:
        break;
    }
    c.op = gpu::ApiOp::Memcpy;
    switch (id) {
      case cbid::cuMemcpyHtoD_v2:
      case cbid::cuMemcpyHtoD_v2_ptds:
        if (auto* p = static_cast<const cuMemcpyHtoD_v2_params*>(params)) {
          c.direction = gpu::CopyDirection::HostToDevice, c.hostSrc = p->srcHost, c.bytes = p->ByteCount;
        }
        return true;
      case cbid::cuMemcpyHtoDAsync_v2:
      case cbid::cuMemcpyHtoDAsync_v2_ptsz:
        if (auto* p = static_cast<const cuMemcpyHtoDAsync_v2_params*>(params)) {
          c.direction = gpu::CopyDirection::HostToDevice, c.hostSrc = p->srcHost, c.bytes = p->ByteCount;
          streamHandle = p->hStream;
        }
        return true;
      case cbid::cuMemcpyDtoH_v2:
      case cbid::cuMemcpyDtoH_v2_ptds:
        if (auto* p = static_cast<const cuMemcpyDtoH_v2_params*>(params))
          c.direction = gpu::CopyDirection::DeviceToHost, c.bytes = p->ByteCount;
        return true;
      case cbid::cuMemcpyDtoHAsync_v2:
      case cbid::cuMemcpyDtoHAsync_v2_ptsz:
        if (auto* p = static_cast<const cuMemcpyDtoHAsync_v2_params*>(params)) {
          c.direction = gpu::CopyDirection::DeviceToHost, c.bytes = p->ByteCount;
          streamHandle = p->hStream;
        }
        return true;
      case cbid::cuMemcpyDtoD_v2:
      case cbid::cuMemcpyDtoD_v2_ptds:
        if (auto* p = static_cast<const cuMemcpyDtoD_v2_params*>(params))
          c.direction = gpu::CopyDirection::DeviceToDevice, c.bytes = p->ByteCount;
        return true;
      case cbid::cuMemcpyDtoDAsync_v2:
      case cbid::cuMemcpyDtoDAsync_v2_ptsz:
        if (auto* p = static_cast<const cuMemcpyDtoDAsync_v2_params*>(params)) {
          c.direction = gpu::CopyDirection::DeviceToDevice, c.bytes = p->ByteCount;
          streamHandle = p->hStream;
        }
        return true;
      case cbid::cuMemcpy:
      case cbid::cuMemcpy_ptds:
        if (auto* p = static_cast<const cuMemcpy_params*>(params))
          c.bytes = p->ByteCount;  // unified: direction unknown
        return true;
      case cbid::cuMemcpyAsync:
      case cbid::cuMemcpyAsync_ptsz:
        if (auto* p = static_cast<const cuMemcpyAsync_params*>(params)) {
          c.bytes = p->ByteCount;
          streamHandle = p->hStream;
        }
        return true;
      default:
        return false;
    }
  }
  if (domain != kDomainRuntime) return false;
  switch (id) {
    case cbid::cudaLaunchKernel_v7000:
    case cbid::cudaLaunchKernel_ptsz_v7000:
      if (auto* p = static_cast<const cudaLaunchKernel_v7000_params*>(params)) {
        c.function = p->func;
        runtimeGeometry(c, p, gpu::Geometry::Exact);
      }
      return true;
    case cbid::cudaLaunchCooperativeKernel_v9000:
    case cbid::cudaLaunchCooperativeKernel_ptsz_v9000:
      if (auto* p = static_cast<const cudaLaunchCooperativeKernel_v9000_params*>(params)) {
        c.function = p->func;
        runtimeGeometry(c, p, gpu::Geometry::Exact);
      }
      return true;
    case cbid::__cudaLaunchKernel_v13000:
    case cbid::__cudaLaunchKernel_ptsz_v13000:
      if (auto* p = static_cast<const LaunchKernelV13Params*>(params)) {
        c.function = p->kernel;
        runtimeGeometry(c, p, gpu::Geometry::Mirrored);
      }
      return true;
    case cbid::cudaLaunchKernelExC_v11060:
    case cbid::cudaLaunchKernelExC_ptsz_v11060:
      if (auto* p = static_cast<const cudaLaunchKernelExC_v11060_params*>(params)) {
        c.function = p->func;
        if (const cudaLaunchConfig_t* cfg = p->config) {
          c.grid = {cfg->gridDim.x, cfg->gridDim.y, cfg->gridDim.z};
          c.block = {cfg->blockDim.x, cfg->blockDim.y, cfg->blockDim.z};
          c.sharedMem = static_cast<uint32_t>(cfg->dynamicSmemBytes);
          c.stream = reinterpret_cast<uintptr_t>(cfg->stream);
          c.geometry = gpu::Geometry::Exact;
        }
      }
      return true;
    case cbid::cudaMemcpy_v3020:
    case cbid::cudaMemcpy_ptds_v7000:
      c.op = gpu::ApiOp::Memcpy;
      if (auto* p = static_cast<const cudaMemcpy_v3020_params*>(params)) {
        c.direction = runtimeDirection(p->kind), c.bytes = p->count;
        if (c.direction == gpu::CopyDirection::HostToDevice) c.hostSrc = p->src;
      }
      return true;
    case cbid::cudaMemcpyAsync_v3020:
    case cbid::cudaMemcpyAsync_ptsz_v7000:
      c.op = gpu::ApiOp::Memcpy;
      if (auto* p = static_cast<const cudaMemcpyAsync_v3020_params*>(params)) {
        c.direction = runtimeDirection(p->kind), c.bytes = p->count;
        if (c.direction == gpu::CopyDirection::HostToDevice) c.hostSrc = p->src;
        streamHandle = p->stream;
      }
      return true;
    default:
      return false;
  }
}

bool isLaunch(uint32_t domain, uint32_t id) noexcept {
  if (domain == kDomainRuntime) {
    for (uint32_t c : cbid::kRuntimeLaunches)
      if (c == id) return true;
    return false;
  }
  for (uint32_t c : cbid::kDriverLaunches)
    if (c == id) return true;
  return false;
}

bool isCopy(uint32_t domain, uint32_t id) noexcept {
  if (domain == kDomainRuntime)
    return id == cbid::cudaMemcpy_v3020 || id == cbid::cudaMemcpy_ptds_v7000 || id == cbid::cudaMemcpyAsync_v3020 ||
           id == cbid::cudaMemcpyAsync_ptsz_v7000;
  for (uint32_t c : cbid::kDriverCopies)
    if (c == id) return true;
  return false;
}

}  // namespace

bool decoderAvailable() noexcept { return true; }

void decodeCallback(CuptiApi& api, gpu::LaunchTracker& tracker, uint32_t domain, uint32_t id,
                    const void* cbdata) noexcept {
  if ((domain != kDomainDriver && domain != kDomainRuntime) || !cbdata) return;
  const auto* d = static_cast<const CUpti_CallbackData*>(cbdata);
  gpu::ApiCall c;
  c.domain = domain == kDomainDriver ? gpu::ApiDomain::Driver : gpu::ApiDomain::Runtime;
  c.cbid = id;
  c.correlationId = d->correlationId;
  if (d->callbackSite == CUPTI_API_EXIT) {
    // The exit site needs only which operation and how it ended.
    c.site = gpu::Site::Exit;
    if (isCopy(domain, id))
      c.op = gpu::ApiOp::Memcpy;
    else if (!isLaunch(domain, id))
      return;
    if (d->functionReturnValue) c.result = *static_cast<const int*>(d->functionReturnValue);
    tracker.onApi(c);
    return;
  }
  c.site = gpu::Site::Enter;
  const void* streamHandle = nullptr;
  if (!decodeEnter(c, domain, id, d->functionParams, streamHandle)) return;
  if (c.op == gpu::ApiOp::Launch) {
    c.name = d->symbolName;
    streamHandle = reinterpret_cast<const void*>(static_cast<uintptr_t>(c.stream));
  }
  c.device = deviceOf(api, d);
  c.stream = streamOf(api, d, streamHandle);
  tracker.onApi(c);
}

#endif  // DLRR_HAVE_CUPTI

}  // namespace dlrr::cupti
