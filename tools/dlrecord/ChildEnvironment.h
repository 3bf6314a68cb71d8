#pragma once
// The recorded job's environment: dlrecord's own, with what the interposer and the Python hook
// need put first (LD_PRELOAD, PYTHONPATH), the DLRR_* settings of this recording, and CUDA's
// injection library for GPU capture (docs/gpu.md). Pure: the caller passes its environment, so
// it is unit-tested (tests/unit/ChildEnvironmentTest.cc).
#include <string>
#include <vector>

#include "tools/dlrecord/InstallPaths.h"
#include "tools/dlrecord/RecordOptions.h"

namespace dlrr {

// `ours`: dlrecord's environment as "K=V" strings; `statusFd`: StatusPipe::environmentValue()
// ("" for none). `gpuOff` is set to why GPU capture is off ("" when on): there is one
// CUDA_INJECTION64_PATH, and a library the user configured is kept.
std::vector<std::string> childEnvironment(const std::vector<std::string>& ours, const RecordOptions& o,
                                          const std::string& trace, const InstallPaths& paths,
                                          const std::string& statusFd, std::string& gpuOff);

// The process's environment as "K=V" strings.
std::vector<std::string> processEnvironment();

}  // namespace dlrr
