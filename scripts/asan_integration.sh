#!/usr/bin/env bash
# Integration tests against an ASan+UBSan build (build-asan): the tools and the preloaded
# libdlrr.so are instrumented, /usr/bin/python3 is not, so the ASan runtime is preloaded
# into every process (dlrecord puts libdlrr.so ahead of it: verify_asan_link_order=0).
# ASan's own SIGSEGV/SIGBUS/SIGFPE/SIGILL/SIGABRT handlers are off so that dlrr's crash
# capture is what the tests see. Leak detection is off (Python's allocations are not ours).
# Not part of scripts/test.sh (CI time budget). Usage: scripts/asan_integration.sh [MODULE...]
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DDLRR_SANITIZE=ON -DDLRR_WERROR=ON >/dev/null || exit 1
cmake --build build-asan -j"${JOBS:-2}" || exit 1
MODULES=("$@")
[ ${#MODULES[@]} -gt 0 ] || MODULES=(test_launcher test_record test_replay)
export DLRR_BUILD=$ROOT/build-asan
export LD_PRELOAD=$(gcc -print-file-name=libasan.so)
export ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:verify_asan_link_order=0:handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_sigill=0:handle_abort=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
cd tests/integration
start=$(date +%s)
/usr/bin/python3 -m unittest -v "${MODULES[@]}" 2>&1 | tee /tmp/dlrr-asan-integration.log
rc=${PIPESTATUS[0]}
echo "== ASan integration (${MODULES[*]}): $(grep -c ' \.\.\. ok$' /tmp/dlrr-asan-integration.log) ok," \
  "$(grep -cE ' \.\.\. (FAIL|ERROR)$' /tmp/dlrr-asan-integration.log) failed," \
  "$(grep -c 'ERROR: AddressSanitizer\|runtime error:' /tmp/dlrr-asan-integration.log) sanitizer reports," \
  "$(( $(date +%s) - start ))s"
exit "$rc"
