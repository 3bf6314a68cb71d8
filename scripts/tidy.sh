#!/usr/bin/env bash
# clang-tidy over dlrr's C++ with the repo's .clang-tidy (bugprone, performance, clang-analyzer;
# findings are errors). Needs build/ (scripts/build.sh): it reads build/compile_commands.json
# and the generated schema headers.
#   scripts/tidy.sh                every first-party .cc
#   scripts/tidy.sh FILE...        those files
#   scripts/tidy.sh --since REF    the .cc files changed since REF (CI: the commit under test)
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
cmake --build build --target dlrr_format >/dev/null  # the generated schema headers
if [ "${1:-}" = "--since" ]; then
  if ! git rev-parse -q --verify "${2:?--since REF}^{commit}" >/dev/null; then
    echo "tidy: $2 is not in this clone: nothing to compare with, skipped"
    exit 0
  fi
  mapfile -t files < <(git diff --name-only --diff-filter=AM "$2" -- '*.cc' | grep -v '^tests/fuzz/' || true)
elif [ $# -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files '*.cc' | grep -v '^tests/fuzz/')
fi
if [ ${#files[@]} -eq 0 ]; then
  echo "tidy: no C++ files to check"
  exit 0
fi
echo "tidy: ${#files[@]} files"
# One clang-tidy per core; a finding anywhere fails the run.
printf '%s\n' "${files[@]}" | xargs -P"$(nproc)" -n4 clang-tidy -p build --quiet 2>/dev/null
