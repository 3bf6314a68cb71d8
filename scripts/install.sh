#!/usr/bin/env bash
# Builds only the tools, libdlrr and the Python hook (no tests, no benchmarks) into
# ./build-install and installs them under PREFIX (default /usr/local): dlrecord, dlreplay,
# dltrace and dlpreflight in PREFIX/bin, the library and the hook in PREFIX/lib/dlrr.
# Idempotent and incremental. Usage: bash scripts/install.sh [PREFIX]
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${1:-/usr/local}
LAUNCHER=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1  # shares ccache's entries with scripts/build.sh
  LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B build-install -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLRR_TESTS=OFF -DDLRR_BENCH=OFF \
  "${LAUNCHER[@]}" >/dev/null
cmake --build build-install -j"$(nproc)"
SUDO=""
if [ ! -w "$(dirname "$PREFIX")" ] && [ ! -w "$PREFIX" ] && [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
$SUDO cmake --install build-install --prefix "$PREFIX" >/dev/null
echo "install: dlrecord, dlreplay, dltrace, dlpreflight in $PREFIX/bin"
