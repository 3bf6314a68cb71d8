// GPU capture's entry points in libdlrr.so:
//  - InitializeInjection: CUDA calls it at driver initialisation when CUDA_INJECTION64_PATH
//    names this library (dlrecord and dlreplay set it). CUPTI is started here, never from the
//    library constructor (NVIDIA advises against CUPTI in LD_PRELOAD constructors, and the
//    driver is not initialised then anyway).
//  - the GPU half of the C API (dlrr.h): device digests, failure-ring bytes, capture status.
#include <pthread.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "dlrr/dlrr.h"
#include "interpose/ActiveSession.h"
#include "interpose/CEnums.h"
#include "interpose/ErrorBoundary.h"
#include "interpose/ReentryGuard.h"
#include "interpose/cuda/DeviceDigestKernel.h"
#include "interpose/cupti/GpuInjection.h"

namespace dlrr {
namespace {

// Created once, never destroyed: CUPTI may call back until the process is gone.
std::atomic<cupti::GpuInjection*> gGpu{nullptr};
std::mutex gStatusMu;
std::string gStatus;  // "" (not started), "on: ...", "off: ..."
thread_local std::string tGpuStatus;

void atforkChild() {
  // CUDA is unusable in a forked child of a process that initialised it; whatever the child
  // calls must not touch the parent's rings or drain thread (which the child does not have).
  if (cupti::GpuInjection* g = gGpu.load()) g->tracker().disable();
}

void startGpuCapture() noexcept {
  static std::atomic<bool> started{false};
  if (started.exchange(true)) return;
  RecordSession* rec = processRecorder();
  if (rec && !rec->active()) rec = nullptr;
  ReplaySession* rep = processReplayer();
  if (!rec && !rep) return;  // not ours: a process dlrecord/dlreplay did not start
  ReentryGuard guard;
  std::string status;
  try {
    auto* g = new cupti::GpuInjection(cupti::makeCuptiApi());
    gGpu.store(g);
    pthread_atfork(nullptr, nullptr, atforkChild);
    status = g->start(rec, rep, std::getenv("DLRR_GPU_CAPTURE"));
  } catch (...) {
    DLRR_SWALLOWED();
    status = "off: internal error";
  }
  std::lock_guard<std::mutex> lk(gStatusMu);
  gStatus = status;
}

}  // namespace
}  // namespace dlrr

using namespace dlrr;

// Called by the CUDA driver (CUDA_INJECTION64_PATH). Returns 1 whatever happens: GPU capture
// problems never fail CUDA's initialisation.
extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  startGpuCapture();
  return 1;
}

extern "C" {

int dlrr_digest_values(int kind, const char* path, uint32_t call_index, uint32_t output, const char* dtype, int ndim,
                       const int64_t* shape, int algorithm, const dlrr_digest_t* digest) {
  if (kind < 0 || kind > kMaxDigestKind || ndim < 0 || ndim > kMaxTensorDims || !digest || algorithm < 0 ||
      algorithm > kMaxDigestAlgorithm)
    return -1;
  DigestResult d;
  d.hash = digest->hash;
  d.nanCount = digest->nan_count;
  d.infCount = digest->inf_count;
  d.min = digest->min;
  d.max = digest->max;
  int rc = -1;
  ProcessSession* s = processSession();  // recorded, or checked (replay)
  if (!s || !s->active()) return -1;
  ReentryGuard g;
  try {
    rc = s->digestValues(kind, path, call_index, output, dtype, ndim, shape, algorithm, d);
  } catch (...) {
    DLRR_SWALLOWED();
  }
  return rc;
}

void dlrr_keep_tensor(int kind, const char* path, uint32_t call_index, uint32_t output, const char* dtype, int ndim,
                      const int64_t* shape, const void* data, uint64_t nbytes) {
  if (kind < 0 || kind > kMaxDigestKind || ndim < 0 || ndim > kMaxTensorDims) return;
  RecordSession* s = processRecorder();
  if (!s || !s->active()) return;
  ReentryGuard g;
  try {
    s->keepTensor(kind, path, call_index, output, dtype, ndim, shape, data, nbytes);
  } catch (...) {
    DLRR_SWALLOWED();
  }
}

void dlrr_gpu_pause(int paused) {
  if (cupti::GpuInjection* g = gGpu.load(std::memory_order_acquire)) g->tracker().pauseThread(paused != 0);
}

void* dlrr_digest_kernel_open(const char** why) {
  static thread_local std::string tWhy;
  try {
    std::unique_ptr<cuda::DeviceDigestKernel> k = cuda::DeviceDigestKernel::open(tWhy);
    if (why) *why = tWhy.c_str();
    return k.release();  // owned by the caller until dlrr_digest_kernel_close
  } catch (...) {
    DLRR_SWALLOWED();
    tWhy = "internal error";
    if (why) *why = tWhy.c_str();
    return nullptr;
  }
}

int dlrr_digest_kernel_launch(void* kernel, const void* data, uint64_t nbytes, uint64_t numel, int element, void* out,
                              void* stream) {
  if (!kernel) return -1;
  try {
    return static_cast<cuda::DeviceDigestKernel*>(kernel)->launch(data, nbytes, numel, element, out, stream);
  } catch (...) {
    DLRR_SWALLOWED();
    return -1;
  }
}

void dlrr_digest_kernel_close(void* kernel) {
  std::unique_ptr<cuda::DeviceDigestKernel> owned(static_cast<cuda::DeviceDigestKernel*>(kernel));
}

void dlrr_gpu_check_launches_now(const char* why) {
  ReplaySession* rep = processReplayer();
  if (!rep) return;
  ReentryGuard guard;
  try {
    rep->checkLaunchesNow(why && *why ? why : "before the stop");
  } catch (...) {  // a report detail: never an error in the job
    DLRR_SWALLOWED();
  }
}

const char* dlrr_gpu_capture_status(void) {
  try {
    std::lock_guard<std::mutex> lk(gStatusMu);
    tGpuStatus = gStatus;
  } catch (...) {
    DLRR_SWALLOWED();
    tGpuStatus.clear();
  }
  return tGpuStatus.c_str();
}

}  // extern "C"
