// The real CuptiApi: libcupti.so is dlopen'ed (RTLD_LOCAL) when GPU capture starts, never at
// link time, so libdlrr.so loads on machines without CUDA. Where to look, in order:
//   1. DLRR_CUPTI_LIBRARY (an explicit path);
//   2. a libcupti the process has already loaded (torch's profiler links one);
//   3. next to the NVIDIA libraries the process has loaded (pip wheels: .../nvidia/cuda_cupti/lib,
//      .../nvidia/cu13/lib), so the CUPTI matches the CUDA the job runs with;
//   4. the library search path (libcupti.so.13, .so.12, .so);
//   5. the toolkit: $CUDA_HOME, $CUDA_PATH, /usr/local/cuda (lib64, extras/CUPTI/lib64).
#include <dlfcn.h>
#include <link.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "interpose/cupti/CuptiApi.h"

#if DLRR_HAVE_CUPTI
#include <cupti.h>
#endif

namespace dlrr::cupti {
namespace {

// Mirrors of the CUPTI signatures (plain types: enums are int-sized, handles are pointers).
struct SubscriberParams {
  size_t structSize;
  const char* subscriberName;
  char* oldSubscriberName;
  size_t oldSubscriberSize;
};
#if DLRR_HAVE_CUPTI
static_assert(sizeof(SubscriberParams) == sizeof(CUpti_SubscriberParams));
static_assert(offsetof(SubscriberParams, oldSubscriberName) == offsetof(CUpti_SubscriberParams, oldSubscriberName));
static_assert(CUpti_SubscriberParams_STRUCT_SIZE == sizeof(SubscriberParams));
#endif

using RawCallback = void (*)(void*, int, uint32_t, const void*);
using SubscribeFn = int (*)(void**, RawCallback, void*);
using SubscribeV2Fn = int (*)(void**, RawCallback, void*, SubscriberParams*);
using UnsubscribeFn = int (*)(void*);
using EnableCallbackFn = int (*)(uint32_t, void*, int, uint32_t);
using EnableDomainFn = int (*)(uint32_t, void*, int);
using GetCallbackNameFn = int (*)(int, uint32_t, const char**);
using GetResultStringFn = int (*)(int, const char**);
using GetVersionFn = int (*)(uint32_t*);
using GetDeviceIdFn = int (*)(void*, uint32_t*);
using GetStreamIdFn = int (*)(void*, void*, uint32_t*);
using FinalizeFn = int (*)();

std::string dirName(const std::string& p) {
  auto s = p.rfind('/');
  return s == std::string::npos ? std::string(".") : p.substr(0, s);
}

int collectNvidiaDirs(dl_phdr_info* info, size_t, void* data) {
  auto* dirs = static_cast<std::vector<std::string>*>(data);
  if (!info->dlpi_name || !*info->dlpi_name) return 0;
  std::string path = info->dlpi_name;
  auto n = path.find("/nvidia/");
  if (n == std::string::npos) return 0;
  std::string root = path.substr(0, n + 8);  // .../nvidia/
  for (const std::string& d : {dirName(path), root + "cuda_cupti/lib", root + "cu13/lib", root + "cu12/lib"}) {
    bool seen = false;
    for (auto& x : *dirs) seen = seen || x == d;
    if (!seen) dirs->push_back(d);
  }
  return 0;
}

class RealCuptiApi final : public CuptiApi {
 public:
  ~RealCuptiApi() override = default;  // the library stays loaded: callbacks may still run

  bool load(std::string& why) override {
    if (handle_) return true;
    std::vector<std::string> tried;
    auto attempt = [&](const std::string& path, int extra) -> bool {
      if (path.empty()) return false;
      void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | extra);
      if (!h) {
        if (!(extra & RTLD_NOLOAD)) {
          const char* e = ::dlerror();
          tried.push_back(e ? e : path);
        }
        return false;
      }
      if (!resolve(h)) {
        tried.push_back(path + ": missing CUPTI symbols");
        ::dlclose(h);
        return false;
      }
      handle_ = h;
      path_ = path;
      Dl_info info{};
      if (::dladdr(reinterpret_cast<void*>(subscribe_), &info) && info.dli_fname) path_ = info.dli_fname;
      return true;
    };
    if (const char* p = std::getenv("DLRR_CUPTI_LIBRARY"); p && *p) {
      if (attempt(p, 0)) return true;
      why = "DLRR_CUPTI_LIBRARY=" + std::string(p) + ": " + (tried.empty() ? "cannot load" : tried.back());
      return false;
    }
    const char* sonames[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};
    for (const char* s : sonames)
      if (attempt(s, RTLD_NOLOAD)) return true;
    std::vector<std::string> dirs;
    ::dl_iterate_phdr(collectNvidiaDirs, &dirs);
    for (const auto& d : dirs)
      for (const char* s : sonames)
        if (attempt(d + "/" + s, 0)) return true;
    for (const char* s : sonames)
      if (attempt(s, 0)) return true;
    std::vector<std::string> roots;
    for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
      if (const char* v = std::getenv(var); v && *v) roots.emplace_back(v);
    roots.emplace_back("/usr/local/cuda");
    for (const auto& r : roots)
      for (const char* sub : {"/lib64/", "/extras/CUPTI/lib64/", "/lib/"})
        for (const char* s : sonames)
          if (attempt(r + sub + s, 0)) return true;
    why = "no libcupti.so found (set DLRR_CUPTI_LIBRARY, or install the CUDA toolkit's CUPTI)";
    if (!tried.empty()) why += "; last error: " + tried.back();
    return false;
  }

  std::string libraryPath() const override { return path_; }

  Result getVersion(uint32_t& v) override { return getVersion_ ? getVersion_(&v) : kErrorNotInitialized; }

  Result subscribe(Subscriber& out, CallbackFn fn, void* userdata, std::string& other) override {
    if (!subscribe_) return kErrorNotInitialized;
    fn_ = fn;
    userdata_ = userdata;
    void* sub = nullptr;
    Result r;
    if (subscribeV2_) {
      char old[128] = {};
      SubscriberParams p{sizeof(SubscriberParams), "dlrr", old, sizeof old};
      r = subscribeV2_(&sub, &RealCuptiApi::trampoline, this, &p);
      if (r != kSuccess && old[0]) other.assign(old, strnlen(old, sizeof old));
    } else {
      r = subscribe_(&sub, &RealCuptiApi::trampoline, this);
    }
    if (r == kSuccess) out = sub;
    return r;
  }

  Result unsubscribe(Subscriber s) override { return unsubscribe_ ? unsubscribe_(s) : kErrorNotInitialized; }

  Result enableCallback(bool enable, Subscriber s, uint32_t domain, uint32_t cbid) override {
    return enableCallback_ ? enableCallback_(enable ? 1 : 0, s, static_cast<int>(domain), cbid) : kErrorNotInitialized;
  }

  Result enableDomain(bool enable, Subscriber s, uint32_t domain) override {
    return enableDomain_ ? enableDomain_(enable ? 1 : 0, s, static_cast<int>(domain)) : kErrorNotInitialized;
  }

  Result getCallbackName(uint32_t domain, uint32_t cbid, const char*& name) override {
    name = nullptr;
    return getCallbackName_ ? getCallbackName_(static_cast<int>(domain), cbid, &name) : kErrorNotSupported;
  }

  const char* resultString(Result r) override {
    const char* s = nullptr;
    if (getResultString_ && getResultString_(r, &s) == kSuccess && s) return s;
    return "CUPTI error";
  }

  Result deviceId(void* context, uint32_t& device) override {
    return getDeviceId_ ? getDeviceId_(context, &device) : kErrorNotSupported;
  }

  Result streamId(void* context, void* stream, uint32_t& id) override {
    return getStreamId_ ? getStreamId_(context, stream, &id) : kErrorNotSupported;
  }

  Result finalize() override { return finalize_ ? finalize_() : kErrorNotInitialized; }

 private:
  static void trampoline(void* self, int domain, uint32_t cbid, const void* cbdata) {
    auto* me = static_cast<RealCuptiApi*>(self);
    me->fn_(me->userdata_, static_cast<uint32_t>(domain), cbid, cbdata);
  }

  template <typename T>
  static T sym(void* h, const char* name) {
    return reinterpret_cast<T>(::dlsym(h, name));
  }

  bool resolve(void* h) {
    subscribe_ = sym<SubscribeFn>(h, "cuptiSubscribe");
    subscribeV2_ = sym<SubscribeV2Fn>(h, "cuptiSubscribe_v2");
    unsubscribe_ = sym<UnsubscribeFn>(h, "cuptiUnsubscribe");
    enableCallback_ = sym<EnableCallbackFn>(h, "cuptiEnableCallback");
    enableDomain_ = sym<EnableDomainFn>(h, "cuptiEnableDomain");
    getCallbackName_ = sym<GetCallbackNameFn>(h, "cuptiGetCallbackName");
    getResultString_ = sym<GetResultStringFn>(h, "cuptiGetResultString");
    getVersion_ = sym<GetVersionFn>(h, "cuptiGetVersion");
    getDeviceId_ = sym<GetDeviceIdFn>(h, "cuptiGetDeviceId");
    getStreamId_ = sym<GetStreamIdFn>(h, "cuptiGetStreamId");
    finalize_ = sym<FinalizeFn>(h, "cuptiFinalize");
    return subscribe_ && unsubscribe_ && enableCallback_;
  }

  void* handle_ = nullptr;
  std::string path_;
  CallbackFn fn_ = nullptr;
  void* userdata_ = nullptr;
  SubscribeFn subscribe_ = nullptr;
  SubscribeV2Fn subscribeV2_ = nullptr;
  UnsubscribeFn unsubscribe_ = nullptr;
  EnableCallbackFn enableCallback_ = nullptr;
  EnableDomainFn enableDomain_ = nullptr;
  GetCallbackNameFn getCallbackName_ = nullptr;
  GetResultStringFn getResultString_ = nullptr;
  GetVersionFn getVersion_ = nullptr;
  GetDeviceIdFn getDeviceId_ = nullptr;
  GetStreamIdFn getStreamId_ = nullptr;
  FinalizeFn finalize_ = nullptr;
};

#if DLRR_HAVE_CUPTI
// The mirrored signatures agree with the headers.
static_assert(std::is_same_v<decltype(&cuptiGetVersion), CUptiResult (*)(uint32_t*)>);
static_assert(sizeof(CUptiResult) == sizeof(int) && sizeof(CUpti_CallbackDomain) == sizeof(int));
static_assert(std::is_same_v<CUpti_CallbackId, uint32_t>);
#endif

}  // namespace

std::unique_ptr<CuptiApi> makeCuptiApi() { return std::make_unique<RealCuptiApi>(); }

}  // namespace dlrr::cupti
