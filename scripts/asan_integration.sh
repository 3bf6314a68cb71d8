#!/usr/bin/env bash
# Integration tests against an ASan+UBSan build (build-asan): the tools and the preloaded
# libdlrr.so are instrumented, /usr/bin/python3 is not, so the ASan runtime is preloaded
# into every process, with libstdc++ (dlrecord puts libdlrr.so ahead of them:
# verify_asan_link_order=0).
# ASan's own SIGSEGV/SIGBUS/SIGFPE/SIGILL/SIGABRT handlers are off so that dlrr's crash
# capture is what the tests see. Leak detection is off (Python's allocations are not ours).
# The tests never give the preload to the system tools they run themselves (gdb -p; no
# pgrep): an uninstrumented program whose libraries' constructors call malloc inside glibc's
# gettext/locale locks (libgpg-error's bindtextdomain: procps; gdb's setlocale) initialises
# the ASan runtime there, and its dlerror() call releases those locks: the program deadlocks.
# Not part of scripts/test.sh (CI time budget). Usage: scripts/asan_integration.sh [MODULE...]
# (default: every tests/integration/test_*.py). dltrace_cli_test.sh is not run here: it
# limits dltrace's address space (ulimit -v 1 GiB), which ASan's shadow memory cannot live
# with; scripts/valgrind_tools.sh covers the tools' C++ side instead (docs/reliability.md).
# For the same reason the tests that run a tool or the job under `ulimit -v`/`prlimit --as`
# fail here (ASan cannot map its shadow memory: "AddressSanitizer failed to allocate"):
# test_hardening.BadInputTest (6) and test_triage's test_cpu_out_of_memory_under_ulimit.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DDLRR_SANITIZE=ON -DDLRR_WERROR=ON >/dev/null || exit 1
cmake --build build-asan -j"${JOBS:-2}" || exit 1
MODULES=("$@")
if [ ${#MODULES[@]} -eq 0 ]; then
  for f in tests/integration/test_*.py; do MODULES+=("$(basename "$f" .py)"); done
fi
export DLRR_BUILD=$ROOT/build-asan
# libstdc++ too: in a process that loads it only later (python3 importing torch, in the tests'
# plain runs without dlrecord) ASan finds no real __cxa_throw and the first C++ throw dies in
# "CHECK failed: asan_interceptors.cpp:320 real___cxa_throw != 0".
export LD_PRELOAD=$(gcc -print-file-name=libasan.so):$(realpath "$(gcc -print-file-name=libstdc++.so.6)")
export ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:verify_asan_link_order=0:handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_sigill=0:handle_abort=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export PYTHONDONTWRITEBYTECODE=1
LOG=${DLRR_ASAN_LOG:-/tmp/dlrr-asan-integration.log}
cd tests/integration
start=$(date +%s)
/usr/bin/python3 -m unittest -v "${MODULES[@]}" 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
# Per module: ok / skipped / failed (FAIL or ERROR), from unittest's verbose lines.
sed -nE 's/^test_[A-Za-z0-9_]+ \(([A-Za-z0-9_]+)\.[^)]*\) \.\.\. (ok|skipped|FAIL|ERROR).*$/\1 \2/p' "$LOG" |
  awk '{m[$1]; if ($2=="ok") ok[$1]++; else if ($2=="skipped") sk[$1]++; else bad[$1]++}
       END {for (k in m) printf "== %s: %d ok, %d skipped, %d failed\n", k, ok[k], sk[k], bad[k]}' | sort
echo "== ASan integration (${MODULES[*]}): $(grep -c ' \.\.\. ok$' "$LOG") ok," \
  "$(grep -cE ' \.\.\. skipped' "$LOG") skipped," \
  "$(grep -cE ' \.\.\. (FAIL|ERROR)$' "$LOG") failed," \
  "$(grep -c 'ERROR: AddressSanitizer: \|ERROR: LeakSanitizer\|runtime error:' "$LOG") sanitizer reports," \
  "$(grep -c 'AddressSanitizer failed to allocate' "$LOG") ASan start-up failures under an address-space limit," \
  "$(( $(date +%s) - start ))s"
exit "$rc"
