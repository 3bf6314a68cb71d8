#!/usr/bin/env bash
# Builds the libFuzzer targets with clang-14 (ASan + UBSan) into build-fuzz and fuzzes one of
# them for SECONDS (default 60). New inputs go to build-fuzz/corpus/TARGET; crashes to
# build-fuzz/artifacts (and the script then fails). Seeds: tests/fuzz/corpus/TARGET, or
# tests/fuzz/corpus/stream_reader for a target without its own (batch_encoding reads stream
# files too).
#   scripts/fuzz.sh [SECONDS] [TARGET]     TARGET: stream_reader (default) | batch_encoding | cli
#   DLRR_FUZZ_RUNS=10000000 scripts/fuzz.sh 86400   # stop after that many executions instead
set -euo pipefail
SECONDS_TO_RUN=${1:-60}
TARGET=${2:-stream_reader}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build-fuzz
JOBS=$(nproc 2>/dev/null || echo 2)

CC=${CC:-clang-14} CXX=${CXX:-clang++-14} cmake -S "$ROOT" -B "$BUILD" -G Ninja \
  -DDLRR_FUZZ=ON -DDLRR_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" --target "fuzz_$TARGET" -j"$JOBS"

CORPUS=$BUILD/corpus/$TARGET
mkdir -p "$CORPUS" "$BUILD/artifacts"
SEEDS=$ROOT/tests/fuzz/corpus/$TARGET
[ -d "$SEEDS" ] || SEEDS=$ROOT/tests/fuzz/corpus/stream_reader
# Command lines: 1 KiB holds dozens of options; longer inputs only slow the CLI target down.
MAX_LEN=65536
[ "$TARGET" = cli ] && MAX_LEN=1024
RUNS=()
[ -n "${DLRR_FUZZ_RUNS:-}" ] && RUNS=(-runs="$DLRR_FUZZ_RUNS")
# The first directory receives new inputs; the committed seeds are only read.
"$BUILD/bin/fuzz_$TARGET" "$CORPUS" "$SEEDS" \
  -max_total_time="$SECONDS_TO_RUN" "${RUNS[@]}" -max_len="$MAX_LEN" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
  -artifact_prefix="$BUILD/artifacts/" -print_final_stats=1
