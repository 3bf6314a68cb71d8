#!/usr/bin/env bash
# Configures and builds dlrr into ./build (warnings are errors). Idempotent and incremental.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache when present: paths relative to the checkout, so worktrees share one cache.
LAUNCHER=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1  # debug info: no cwd in the hash
  LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLRR_WERROR=ON "${LAUNCHER[@]}" >/dev/null
cmake --build build -j"$(nproc)"
