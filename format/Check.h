#pragma once
// Checks with context, in the shape of kj's KJ_ASSERT / KJ_REQUIRE. A failed check throws with
// the condition's text and the values named after it, so whatever catches it (the library's
// error boundary, interpose/ErrorBoundary.h, or a tool's top level) prints something a bug
// report can act on instead of "internal error".
//
//   DLRR_ASSERT(cond, values...)              dlrr's own invariant; throws InternalError naming
//                                             the source file and line (a bug in dlrr).
//   DLRR_REQUIRE(cond, kind, what, values...) a fact of the input (a trace, an argument); throws
//                                             TraceError(kind) whose text is `what` and the values
//                                             (no source position: the user's input is at fault).
//
// The values are printed as "name = value" pairs: DLRR_ASSERT(n <= cap, n, cap) fails with
// "format/X.cc:12: assertion failed: n <= cap [n = 9, cap = 8]".
#include <concepts>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

#include "format/TraceError.h"

namespace dlrr {

// A broken invariant of dlrr's own code.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace check_detail {

template <typename T>
void show(std::ostringstream& os, const T& v) {
  if constexpr (std::same_as<T, bool>)
    os << (v ? "true" : "false");
  else if constexpr (std::integral<T>)
    os << +v;  // a uint8_t is a number here, not a character
  else if constexpr (std::convertible_to<const T&, std::string_view>)
    os << '\'' << std::string_view(v) << '\'';
  else
    os << v;
}

// Splits "a, f(b, c), d" at its top-level commas: the names of the values, as written.
std::string_view nextName(std::string_view& names);

// " [a = 1, b = 'x']", or "" without values.
template <typename... T>
std::string context(std::string_view names, const T&... values) {
  if constexpr (sizeof...(T) == 0) {
    return {};
  } else {
    std::ostringstream os;
    os << " [";
    bool first = true;
    ((os << (first ? "" : ", ") << nextName(names) << " = ", show(os, values), first = false), ...);
    os << ']';
    return os.str();
  }
}

[[noreturn]] void assertFailed(const char* file, int line, const char* cond, const std::string& context);
[[noreturn]] void requireFailed(ErrorKind kind, const std::string& what, const std::string& context);

}  // namespace check_detail
}  // namespace dlrr

#define DLRR_ASSERT(cond, ...)                                                                                    \
  do {                                                                                                            \
    if (!(cond)) [[unlikely]]                                                                                     \
      ::dlrr::check_detail::assertFailed(__FILE__, __LINE__, #cond,                                               \
                                         ::dlrr::check_detail::context(#__VA_ARGS__ __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)

#define DLRR_REQUIRE(cond, kind, what, ...)                                                                        \
  do {                                                                                                             \
    if (!(cond)) [[unlikely]]                                                                                      \
      ::dlrr::check_detail::requireFailed(kind, what,                                                              \
                                          ::dlrr::check_detail::context(#__VA_ARGS__ __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
