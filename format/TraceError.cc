#include "format/TraceError.h"

namespace dlrr {

const char* errorKindName(ErrorKind k) noexcept {
  switch (k) {
    case ErrorKind::Io:
      return "io";
    case ErrorKind::NotATrace:
      return "not-a-trace";
    case ErrorKind::FutureVersion:
      return "future-version";
    case ErrorKind::Corrupt:
      return "corrupt";
    case ErrorKind::Usage:
      return "usage";
    case ErrorKind::NotFound:
      return "not-found";
  }
  return "?";
}

}  // namespace dlrr
