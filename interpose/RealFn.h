#pragma once
// The definition of a libc entry point that dlrr's own hides (dlsym RTLD_NEXT): what every hook
// calls through. realVersioned() for the symbols glibc keeps in several versions.
#include <dlfcn.h>

namespace dlrr {

template <typename Fn>
Fn realFn(const char* name) noexcept {
  return reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, name));
}

template <typename Fn>
Fn realVersioned(const char* name, const char* version) noexcept {
  return reinterpret_cast<Fn>(::dlvsym(RTLD_NEXT, name, version));
}

}  // namespace dlrr
