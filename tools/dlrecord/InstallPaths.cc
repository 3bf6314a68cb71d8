#include "tools/dlrecord/InstallPaths.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "format/TraceError.h"

namespace dlrr {

InstallPaths findInstallPaths() {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  fs::path libDir = exe.parent_path().parent_path() / "lib" / "dlrr";
  InstallPaths p;
  p.library = (libDir / "libdlrr.so").string();
  p.pythonHook = (libDir / "python").string();
  if (!fs::exists(p.library, ec))
    throw TraceError(ErrorKind::Io, "the interposer library " + p.library + " is missing (incomplete installation?)");
  if (!fs::exists(fs::path(p.pythonHook) / "sitecustomize.py", ec))
    throw TraceError(ErrorKind::Io, "the Python hook " + p.pythonHook + "/sitecustomize.py is missing");
  return p;
}

}  // namespace dlrr
