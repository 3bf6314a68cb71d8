#pragma once
// The few CUPTI calls GPU capture makes, behind an interface: the real implementation
// (CuptiApiReal.cc) dlopen's libcupti.so at run time, so libdlrr.so links no CUDA library and
// loads on machines without one; tests use FakeCuptiApi. No CUPTI header is needed to use it:
// results, domains and callback ids are plain integers with CUPTI's values (checked against
// the headers in CuptiDecode.cc when the toolkit is there).
#include <cstdint>
#include <memory>
#include <string>

namespace dlrr::cupti {

using Result = int;  // CUptiResult
inline constexpr Result kSuccess = 0;
inline constexpr Result kErrorInvalidParameter = 1;
inline constexpr Result kErrorInvalidContext = 3;
inline constexpr Result kErrorNotCompatible = 14;
inline constexpr Result kErrorNotInitialized = 15;
inline constexpr Result kErrorNotSupported = 27;
inline constexpr Result kErrorVirtualizedDeviceNotSupported = 33;
inline constexpr Result kErrorCudaCompilerNotCompatible = 34;
inline constexpr Result kErrorInsufficientPrivileges = 35;
inline constexpr Result kErrorMultipleSubscribers = 39;
inline constexpr Result kErrorConfidentialComputing = 41;
inline constexpr Result kErrorMigDeviceNotSupported = 43;
inline constexpr Result kErrorUnknown = 999;

inline constexpr uint32_t kDomainDriver = 1;   // CUPTI_CB_DOMAIN_DRIVER_API
inline constexpr uint32_t kDomainRuntime = 2;  // CUPTI_CB_DOMAIN_RUNTIME_API

// The callback CUPTI calls (cbdata is a CUpti_CallbackData* for the driver/runtime domains).
using CallbackFn = void (*)(void* userdata, uint32_t domain, uint32_t cbid, const void* cbdata);
using Subscriber = void*;  // CUpti_SubscriberHandle

class CuptiApi {
 public:
  virtual ~CuptiApi() = default;
  // Finds and loads the library and its symbols; false with the reason when it cannot.
  virtual bool load(std::string& why) = 0;
  virtual std::string libraryPath() const = 0;
  virtual Result getVersion(uint32_t& version) = 0;
  // otherSubscriber: on kErrorMultipleSubscribers, the name of the subscriber already there
  // when CUPTI tells it (cuptiSubscribe_v2), else empty.
  virtual Result subscribe(Subscriber& out, CallbackFn fn, void* userdata, std::string& otherSubscriber) = 0;
  virtual Result unsubscribe(Subscriber s) = 0;
  virtual Result enableCallback(bool enable, Subscriber s, uint32_t domain, uint32_t cbid) = 0;
  virtual Result enableDomain(bool enable, Subscriber s, uint32_t domain) = 0;
  virtual Result getCallbackName(uint32_t domain, uint32_t cbid, const char*& name) = 0;
  // Never null.
  virtual const char* resultString(Result r) = 0;
  // Used from the callback (cached per thread by the decoder): the device ordinal of a
  // context, and CUPTI's id of a stream (ids are assigned in creation order, so they are
  // comparable across runs, unlike handles).
  virtual Result deviceId(void* context, uint32_t& device) = 0;
  virtual Result streamId(void* context, void* stream, uint32_t& id) = 0;
  virtual Result finalize() = 0;
};

// The real CUPTI, loaded on demand. Never fails to construct; load() says what is missing.
std::unique_ptr<CuptiApi> makeCuptiApi();

}  // namespace dlrr::cupti
