#pragma once
// A CuptiApi for tests and the benchmark: records what it is asked, answers what it is told,
// and lets the test fire callbacks as CUPTI would.
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "interpose/cupti/CuptiApi.h"

namespace dlrr::cupti {

class FakeCuptiApi : public CuptiApi {
 public:
  // What the fake answers.
  bool loadOk = true;
  std::string loadWhy = "libcupti.so: cannot open shared object file";
  uint32_t version = 130001;
  Result subscribeResult = kSuccess;
  std::string otherSubscriber;
  std::set<std::pair<uint32_t, uint32_t>> unsupported;  // (domain, cbid) -> kErrorInvalidParameter
  Result enableResult = kSuccess;                       // for all others
  uint32_t device = 0;
  Result deviceResult = kSuccess;
  Result streamResult = kSuccess;

  // What it was asked.
  int loads = 0;
  int subscribes = 0;
  int unsubscribes = 0;
  int finalizes = 0;
  int deviceQueries = 0;
  int streamQueries = 0;
  std::vector<std::tuple<bool, uint32_t, uint32_t>> enabled;  // (enable, domain, cbid)
  CallbackFn callback = nullptr;
  void* userdata = nullptr;
  bool subscribed = false;

  bool load(std::string& why) override {
    ++loads;
    if (!loadOk) why = loadWhy;
    return loadOk;
  }
  std::string libraryPath() const override { return "/fake/libcupti.so"; }
  Result getVersion(uint32_t& v) override {
    v = version;
    return kSuccess;
  }
  Result subscribe(Subscriber& out, CallbackFn fn, void* ud, std::string& other) override {
    ++subscribes;
    if (subscribeResult != kSuccess) {
      other = otherSubscriber;
      return subscribeResult;
    }
    callback = fn;
    userdata = ud;
    subscribed = true;
    out = this;
    return kSuccess;
  }
  Result unsubscribe(Subscriber) override {
    ++unsubscribes;
    subscribed = false;
    callback = nullptr;
    return kSuccess;
  }
  Result enableCallback(bool enable, Subscriber, uint32_t domain, uint32_t cbid) override {
    if (unsupported.count({domain, cbid})) return kErrorInvalidParameter;
    if (enableResult != kSuccess) return enableResult;
    enabled.emplace_back(enable, domain, cbid);
    return kSuccess;
  }
  Result enableDomain(bool enable, Subscriber, uint32_t domain) override {
    enabled.emplace_back(enable, domain, UINT32_MAX);
    return kSuccess;
  }
  Result getCallbackName(uint32_t, uint32_t cbid, const char*& name) override {
    static thread_local std::string n;
    n = "cbid" + std::to_string(cbid);
    name = n.c_str();
    return kSuccess;
  }
  const char* resultString(Result r) override {
    switch (r) {
      case kSuccess:
        return "CUPTI_SUCCESS";
      case kErrorMultipleSubscribers:
        return "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED";
      case kErrorUnknown:
        return "CUPTI_ERROR_UNKNOWN";
      case kErrorInsufficientPrivileges:
        return "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES";
      default:
        return "CUPTI_ERROR_OTHER";
    }
  }
  Result deviceId(void*, uint32_t& d) override {
    ++deviceQueries;
    d = device;
    return deviceResult;
  }
  Result streamId(void*, void* stream, uint32_t& id) override {
    ++streamQueries;
    id = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(stream) & 0xFFFF) + 7;
    return streamResult;
  }
  Result finalize() override {
    ++finalizes;
    return kSuccess;
  }

  // As CUPTI would: the registered callback with a CUpti_CallbackData-shaped cbdata.
  void fire(uint32_t domain, uint32_t cbid, const void* cbdata) const {
    if (callback) callback(userdata, domain, cbid, cbdata);
  }
  bool isEnabled(uint32_t domain, uint32_t cbid) const {
    for (auto& [en, d, c] : enabled)
      if (en && d == domain && c == cbid) return true;
    return false;
  }
};

}  // namespace dlrr::cupti
