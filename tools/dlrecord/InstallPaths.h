#pragma once
// Where the tools find the preloaded library and the Python hook: next to their own
// executable (bin/../lib/dlrr/), the same in the build tree and in an installation.
#include <string>

namespace dlrr {

struct InstallPaths {
  std::string library;     // .../lib/dlrr/libdlrr.so
  std::string pythonHook;  // .../lib/dlrr/python (holds sitecustomize.py)
};

// Throws TraceError(Io) naming what is missing. DLRR_LIBRARY overrides the library path.
InstallPaths findInstallPaths();

}  // namespace dlrr
