#!/usr/bin/env bash
# Configures and builds dlrr into ./build (warnings are errors). Idempotent and incremental.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLRR_WERROR=ON >/dev/null
cmake --build build -j"$(nproc)"
