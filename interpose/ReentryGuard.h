#pragma once
// A per-thread guard against recording the library's own libc calls (the writer's reads, the
// trace reader's opens, ...): the hooks pass such calls through untouched.
namespace dlrr {

class ReentryGuard {
 public:
  ReentryGuard() noexcept : first_(!depth()) { ++depth(); }
  ~ReentryGuard() { --depth(); }
  ReentryGuard(const ReentryGuard&) = delete;
  ReentryGuard& operator=(const ReentryGuard&) = delete;
  explicit operator bool() const noexcept { return first_; }

 private:
  static int& depth() noexcept {
    thread_local int d = 0;
    return d;
  }
  bool first_;
};

}  // namespace dlrr
