#include "tools/common/ExitCodes.h"

namespace dlrr {

int exitCodeFor(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::Io:
      return kExitIo;
    case ErrorKind::NotATrace:
      return kExitNotATrace;
    case ErrorKind::FutureVersion:
      return kExitFutureVersion;
    case ErrorKind::Corrupt:
      return kExitCorrupt;
    case ErrorKind::Usage:
      return kExitUsage;
    case ErrorKind::NotFound:
      return kExitNotFound;
  }
  return kExitInternal;
}

}  // namespace dlrr
