#!/usr/bin/env bash
# ThreadSanitizer build of the unit tests (build-tsan/), then runs them: the recorder's writer
# thread, the failure ring, CUPTI's drain thread and the fork protocol under TSan. The
# hook's Python tests and the integration tests are not run here (the preloaded library
# under TSan inside CPython reports CPython's own races).
set -euo pipefail
cd "$(dirname "$0")/.."
LAUNCHER=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
  LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DDLRR_TSAN=ON -DDLRR_WERROR=ON "${LAUNCHER[@]}" >/dev/null
cmake --build build-tsan -j"$(nproc)" --target dlrr_unit_tests
# halt_on_error: a data race fails the run; second_deadlock_stack for lock-order reports.
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  ctest --test-dir build-tsan --output-on-failure -j2 -L unit -LE python
