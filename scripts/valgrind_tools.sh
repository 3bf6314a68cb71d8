#!/usr/bin/env bash
# The tools' C++ side under valgrind (memcheck), on the normal build (./build): what the ASan
# integration run (scripts/asan_integration.sh) cannot reach, namely dltrace_cli_test.sh's
# damaged traces (it limits dltrace's address space, which ASan cannot live with), plus
# every dltrace command, dlreplay and dlrecord themselves on short recordings.
# Each checked command runs as `valgrind --error-exitcode=99 --trace-children=no ...`: the
# job (python3 + libdlrr.so) is not under valgrind (the ASan run covers libdlrr.so), only the
# tool. Any memcheck error makes the command exit 99 and this script fail.
# Usage: scripts/valgrind_tools.sh   (builds ./build first; about 10 minutes on 2 cores)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
bash scripts/build.sh >/dev/null || exit 1
BIN=$ROOT/build/bin
PY=/usr/bin/python3
TINY=$ROOT/tests/integration/jobs/tiny_train.py
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dlrr-valgrind-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
VG=(valgrind -q --error-exitcode=99 --trace-children=no --track-origins=yes --num-callers=30)
unset LD_PRELOAD
start=$(date +%s)
ran=0
bad=0

# check WANT_RC ARGS...: runs ARGS under valgrind; a memcheck error (99) or another exit code
# than WANT_RC ('any': anything but 99) is a failure.
check() {
  local want=$1
  shift
  ran=$((ran + 1))
  "${VG[@]}" "$@" >"$WORK/out" 2>"$WORK/err" </dev/null
  local rc=$?
  if [ "$rc" = 99 ] || { [ "$want" != any ] && [ "$rc" != "$want" ]; }; then
    bad=$((bad + 1))
    echo "FAIL (exit $rc, want $want): $*"
    grep -E '^==[0-9]+==' "$WORK/err" | head -40
  else
    echo "ok   (exit $rc): ${*#"$BIN/"}"
  fi
}

# Short recordings, made without valgrind: a clean run, a native crash, a Python exception,
# and one killed mid-run (kill -9), then the sample traces the CLI test uses.
"$BIN/dlrecord" -q -o "$WORK/clean" -- $PY "$TINY" --steps 6 >/dev/null 2>&1
"$BIN/dlrecord" -q -o "$WORK/segv" -- $PY "$TINY" --steps 6 --segv-at 3 >/dev/null 2>&1
"$BIN/dlrecord" -q -o "$WORK/raise" -- $PY "$TINY" --steps 6 --raise-at 3 >/dev/null 2>&1
"$BIN/dlrecord" -q -o "$WORK/killed" -- $PY "$TINY" --steps 400 >/dev/null 2>&1 &
rec=$!
for _ in $(seq 300); do
  [ -n "$(cat /proc/$rec/task/$rec/children 2>/dev/null)" ] && [ -s "$WORK/killed/launcher.dls" ] && break
  sleep 0.1
done
sleep 8
for c in $(cat /proc/$rec/task/$rec/children 2>/dev/null); do kill -9 "$c"; done
wait $rec
"$BIN/dlrr_make_sample_trace" "$WORK/sample" --steps 6 --nan-at 4 --rich >/dev/null 2>&1 || echo "note: no sample trace"
"$BIN/dlrr_make_sample_trace" "$WORK/sample-crash" --steps 4 --crash >/dev/null 2>&1 || echo "note: no crash sample trace"

for t in clean segv raise killed sample sample-crash; do
  T=$WORK/$t
  [ -d "$T" ] || continue
  check any "$BIN/dltrace" info "$T"
  check any "$BIN/dltrace" info "$T" --json
  check any "$BIN/dltrace" steps "$T" --json
  check any "$BIN/dltrace" events "$T"
  check any "$BIN/dltrace" events "$T" --json --kind failure
  check 0 "$BIN/dltrace" verify "$T"
  check any "$BIN/dltrace" triage "$T" --json
  check any "$BIN/dltrace" env "$T"
  check any "$BIN/dltrace" env-diff "$T" --no-python
  check any "$BIN/dltrace" dump "$T" --step 1 --rng torchCpu -o "$WORK/rng-$t.npy"
  check any "$BIN/dltrace" dump "$T" --step 1 --batch -o "$WORK/batch-$t.npy"
done
# Damaged copies of the clean trace: truncated, a flipped byte in the middle, a bad header.
for how in truncate flip header; do
  D=$WORK/damaged-$how
  cp -r "$WORK/clean" "$D"
  for f in "$D"/*.dls; do
    size=$(stat -c %s "$f")
    case $how in
      truncate) truncate -s $((size * 2 / 3)) "$f" ;;
      flip) printf '\xff' | dd of="$f" bs=1 seek=$((size / 2)) conv=notrunc status=none ;;
      header) printf 'XXXXXXXX' | dd of="$f" bs=1 seek=0 conv=notrunc status=none ;;
    esac
  done
  check any "$BIN/dltrace" info "$D" --json
  check any "$BIN/dltrace" steps "$D"
  check any "$BIN/dltrace" events "$D"
  check any "$BIN/dltrace" verify "$D"
  check any "$BIN/dltrace" triage "$D"
  check any "$BIN/dlreplay" "$D" --until end
done
# dlreplay (the replayed job runs outside valgrind) and dlrecord itself on a short job.
check 0 "$BIN/dlreplay" "$WORK/clean" --until end
check 0 "$BIN/dlreplay" "$WORK/clean" --until step=3
check 0 "$BIN/dlreplay" "$WORK/segv" --until crash
check 0 "$BIN/dlreplay" "$WORK/raise" --until crash
check any "$BIN/dlreplay" "$WORK/killed" --until end
check 0 "$BIN/dlrecord" -q -o "$WORK/under-valgrind" -- $PY "$TINY" --steps 4
check 0 "$BIN/dltrace" verify "$WORK/under-valgrind"
check 139 "$BIN/dlrecord" -q -o "$WORK/under-valgrind-segv" -- $PY "$TINY" --steps 4 --segv-at 2
check any "$BIN/dlrecord" --no-such-option
echo "== valgrind: $ran commands, $bad failed, $(( $(date +%s) - start ))s"
[ "$bad" = 0 ]
