#!/usr/bin/env bash
# CLI test for dltrace: runs it on sample traces written by dlrr_make_sample_trace and on
# damaged copies, and checks exit codes (docs/cli.md), one-line errors and parseable JSON.
#   dltrace_cli_test.sh DLTRACE MAKE_SAMPLE_TRACE
set -u
DLTRACE=$1
MAKE=$2
PY=/usr/bin/python3
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dltrace-cli-XXXXXX")
trap 'chmod -R u+rwx "$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT
failures=0
OUT=$WORK/out
ERR=$WORK/err

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# expect RC ARGS...: runs dltrace, checks the exit code, that it did not hang or crash, and
# that an error is one line ("dltrace: ...") plus, for usage errors, one usage line.
expect() {
  local want=$1
  shift
  # 1 GiB of address space at most: a length read from a damaged trace must never become an
  # allocation (the reader caps every frame at 64 MiB).
  (ulimit -v 1048576 && exec timeout 30 "$DLTRACE" "$@") >"$OUT" 2>"$ERR"
  local rc=$?
  if [ "$rc" != "$want" ]; then
    fail "dltrace $* exited $rc, expected $want; stderr: $(head -c 400 "$ERR")"
    return
  fi
  if [ "$rc" -ge 2 ]; then
    local lines errlines
    errlines=$(grep -v '^dltrace: warning: ' "$ERR" | wc -l)
    lines=$([ "$rc" = 2 ] && echo 2 || echo 1)
    [ "$errlines" = "$lines" ] || fail "dltrace $* wrote $errlines error lines, expected $lines: $(cat "$ERR")"
    grep -v '^dltrace: warning: ' "$ERR" | head -1 | grep -q '^dltrace: ' || fail "dltrace $*: error does not start with 'dltrace: '"
  fi
  if grep -qiE 'terminate called|Aborted|Segmentation|sanitizer' "$ERR"; then fail "dltrace $* crashed: $(cat "$ERR")"; fi
}

# json CHECK: parses $OUT as one JSON document and runs the Python expression CHECK on it (d).
json() {
  "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); assert $1, d" "$OUT" 2>"$WORK/pyerr" ||
    fail "JSON check '$1' failed: $(tail -2 "$WORK/pyerr")"
}

# npy FILE DESCR SHAPE NBYTES: checks a .npy file's header and data size without NumPy.
npy() {
  "$PY" - "$@" <<'PYEOF' || fail "npy check $* failed"
import ast, struct, sys
path, descr, shape, nbytes = sys.argv[1], sys.argv[2], ast.literal_eval(sys.argv[3]), int(sys.argv[4])
b = open(path, 'rb').read()
assert b[:8] == b'\x93NUMPY\x01\x00', b[:8]
n = struct.unpack('<H', b[8:10])[0]
assert (10 + n) % 64 == 0
h = ast.literal_eval(b[10:10 + n].decode('latin1'))
assert h == {'descr': descr, 'fortran_order': False, 'shape': shape}, h
assert len(b) - 10 - n == nbytes, (len(b) - 10 - n, nbytes)
PYEOF
}

T=$WORK/good
"$MAKE" "$T" --steps 6 --nan-at 4 --rich >/dev/null || { echo "cannot make a sample trace" >&2; exit 1; }

# --- a good trace
expect 0 info "$T"
grep -q 'python3 train.py' "$OUT" || fail "info does not show the command"
expect 0 info "$T" --json
json 'd["format_version"] == "1.0" and d["command"] == ["python3", "train.py"] and d["exit_code"] == 0'
json 'd["steps"] == 6 and d["failure"]["kind"] == "nonfinite" and d["failure"]["step"] == 4 and d["failure"]["where"] == "fc1"'
json 'len(d["processes"]) == 2 and d["bytes"]["stored"] > 0 and d["processes"][1]["clean"] is True'
expect 0 steps "$T"
[ "$(wc -l <"$OUT")" = 7 ] || fail "steps printed $(wc -l <"$OUT") lines, expected a header and 6 steps"
expect 0 steps "$T" --json
json 'len(d["steps"]) == 6 and d["steps"][4]["loss"] == "nan" and d["steps"][4]["non_finite"] == 1 and d["error"] is None'
expect 0 events "$T"
grep -q 'batch: .*float32\[2,128\]' "$OUT" || fail "events does not show batch dtypes and shapes"
grep -q 'entropy: getrandom 24 B' "$OUT" || fail "events does not show entropy"
if grep -q $'\x1b' "$OUT"; then fail "events let a terminal escape through"; fi
expect 0 events "$T" --json
"$PY" -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' "$OUT" || fail "events --json is not JSON Lines"
expect 0 events "$T" --step 4 --kind failure
grep -q 'failure: nonfinite at step 4' "$OUT" || fail "events --step 4 --kind failure: $(cat "$OUT")"
grep -q 'line 42, in forward' "$OUT" || fail "failure traceback not shown"
[ "$(grep -c ' 3 ' "$OUT")" = 0 ] || fail "events --step 4 shows other steps"
expect 0 events "$T" --stream p101 --step 2 --kind stepEnd
[ "$(wc -l <"$OUT")" = 1 ] || fail "events --step 2 --kind stepEnd printed $(wc -l <"$OUT") lines"
expect 0 dump "$T" --step 3 --batch inputs.0 -o "$WORK/x.npy"
npy "$WORK/x.npy" '<f4' '(2, 128)' 1024
expect 0 dump "$T" --step 3 --batch=inputs.1 -o "$WORK/h.npy"
npy "$WORK/h.npy" '<u2' '(256,)' 512
grep -q 'bfloat16' "$ERR" || fail "dump of bfloat16 does not say it wrote uint16"
expect 0 dump "$T" --step 3 --batch label -o "$WORK/l.npy"
npy "$WORK/l.npy" '<i8' '(2,)' 16
expect 0 dump "$T" --step 3 --batch id -o "$WORK/i.npy"
npy "$WORK/i.npy" '<i8' '()' 8
expect 0 dump "$T" --step 3 --rng torchCpu -o "$WORK/r.npy"
npy "$WORK/r.npy" '|u1' '(64,)' 64
expect 0 dump "$T" --step 4 --tensor fc1 -o "$WORK/t.npy"
npy "$WORK/t.npy" '<f4' '(2, 4)' 32
expect 2 dump "$T" --step 3 --batch -o "$WORK/x.npy"
grep -q 'inputs.0' "$ERR" || fail "dump without PATH does not list the paths"
expect 7 dump "$T" --step 3 --batch nope -o "$WORK/x.npy"
expect 7 dump "$T" --step 99 --batch inputs.0 -o "$WORK/x.npy"
expect 7 dump "$T" --step 3 --tensor fc1 -o "$WORK/x.npy"
expect 7 events "$T" --step 99
expect 7 steps "$T" --stream nope
expect 3 dump "$T" --step 3 --batch inputs.0 -o "$WORK/no/such/dir/x.npy"
expect 0 verify "$T"

# --- a trace whose writer was killed after a commit: no footer, still intact
C=$WORK/crashed
"$MAKE" "$C" --steps 4 --crash >/dev/null
expect 0 info "$C" --json
json 'd["steps"] == 4 and d["processes"][1]["clean"] is False and d["processes"][1]["damage"] is None'
expect 0 events "$C" --step 2
expect 0 verify "$C"

# --- damaged copies
P=p101.dls
SIZE=$(stat -c %s "$T/$P")
# Cut mid-frame: what a writer killed mid-write (or on a full disk) leaves; recovered, not damage.
cp -r "$T" "$WORK/torn" && truncate -s $((SIZE / 2 + 7)) "$WORK/torn/$P"
expect 0 verify "$WORK/torn"
grep -q 'p101: ok (.*recovered' "$OUT" || fail "verify does not call a torn stream recovered: $(cat "$OUT")"
expect 0 info "$WORK/torn" --json
json 'd["processes"][1]["damage"] is not None and d["processes"][1]["torn"] is True'
expect 0 info "$WORK/torn"
grep -q 'torn' "$OUT" || fail "info does not show the torn state: $(cat "$OUT")"
expect 0 steps "$WORK/torn"
grep -q 'warning' "$ERR" || fail "steps on a torn stream does not warn"
# ... but bytes after the last frame that are not the start of a frame are damage.
cp -r "$C" "$WORK/tornjunk" && printf 'this is not a frame header at all!' >>"$WORK/tornjunk/$P"
expect 1 verify "$WORK/tornjunk"
grep -q 'steps readable' "$OUT" || fail "verify does not say what is readable: $(cat "$OUT")"
# Killed between the footer and the trailer, and killed while creating the stream.
cp -r "$T" "$WORK/notrailer" && truncate -s $((SIZE - 24)) "$WORK/notrailer/$P"
expect 0 verify "$WORK/notrailer"
cp -r "$T" "$WORK/birth" && head -c 10 "$T/$P" >"$WORK/birth/$P"
expect 0 verify "$WORK/birth"
grep -q 'p101: ok (0 steps, recovered' "$OUT" || fail "verify on a stream torn at birth: $(cat "$OUT")"
expect 0 info "$WORK/birth" --json
json 'd["unreadable_streams"][0]["torn"] is True'

cp -r "$T" "$WORK/flip" && printf '\xff' | dd of="$WORK/flip/$P" bs=1 seek=$((SIZE / 2)) conv=notrunc 2>/dev/null
expect 1 verify "$WORK/flip"
expect 0 info "$WORK/flip" --json
json 'd["format_version"] == "1.0"'

cp -r "$T" "$WORK/hdr" && printf '\xff' | dd of="$WORK/hdr/$P" bs=1 seek=40 conv=notrunc 2>/dev/null
expect 1 verify "$WORK/hdr"
grep -q 'p101: unreadable' "$OUT" || fail "verify does not name the unreadable stream"
expect 0 info "$WORK/hdr" --json
json 'd["unreadable_streams"][0]["stream"] == "p101"'

cp -r "$T" "$WORK/cat" && cat "$T/$P" "$T/$P" >"$WORK/cat/$P"
expect 1 verify "$WORK/cat"
grep -q 'concatenated' "$OUT" || fail "verify does not detect concatenation: $(cat "$OUT")"

cp -r "$T" "$WORK/future" && printf '\x09' | dd of="$WORK/future/$P" bs=1 seek=8 conv=notrunc 2>/dev/null
for cmd in info steps events verify triage env env-diff; do expect 5 $cmd "$WORK/future"; done
expect 5 dump "$WORK/future" --step 1 --batch inputs.0 -o "$WORK/x.npy"
grep -q '9.0' "$ERR" || fail "future version error does not name the version"

# --- not traces
mkdir -p "$WORK/empty"
echo hello >"$WORK/plain"
mkdir -p "$WORK/junk" && head -c 300 /dev/urandom >"$WORK/junk/x.dls"
for cmd in info steps events verify triage env env-diff; do
  expect 3 $cmd "$WORK/missing"
  expect 4 $cmd "$WORK/empty"
  expect 4 $cmd "$WORK/plain"
  expect 4 $cmd "$T/$P"
  expect 4 $cmd "$WORK/junk"
done
grep -q 'pass the trace directory' "$ERR" || true

# --- a directory where a stream file is expected, a FIFO planted as a stream (must not hang)
mkdir -p "$WORK/dirstream/launcher.dls"
expect 4 info "$WORK/dirstream"
grep -q 'is a directory' "$ERR" || fail "a directory named like a stream is not named: $(cat "$ERR")"
for cmd in steps events verify triage env env-diff; do expect 4 $cmd "$WORK/dirstream"; done
cp -r "$T" "$WORK/fifo" && mkfifo "$WORK/fifo/p999.dls"
expect 1 verify "$WORK/fifo"
grep -q 'p999: unreadable: .*not a regular file' "$OUT" || fail "verify on a planted FIFO: $(cat "$OUT")"
expect 0 info "$WORK/fifo" --json
json 'd["unreadable_streams"][0]["stream"] == "p999" and d["steps"] == 6'
expect 0 steps "$WORK/fifo"
expect 0 dump "$WORK/fifo" --step 3 --batch inputs.0 -o "$WORK/x.npy"
# dump on the damaged and foreign copies: one line, a documented code, never a crash
expect 4 dump "$WORK/junk" --step 1 --batch inputs.0 -o "$WORK/x.npy"
expect 4 dump "$WORK/plain" --step 1 --batch inputs.0 -o "$WORK/x.npy"
expect 3 dump "$WORK/missing" --step 1 --batch inputs.0 -o "$WORK/x.npy"
expect 7 dump "$WORK/birth" --step 1 --batch inputs.0 -o "$WORK/x.npy"

# --- permissions: drop to nobody when running as root (root reads everything)
if [ "$(id -u)" = 0 ]; then
  if command -v setpriv >/dev/null; then
    chmod 755 "$WORK"
    cp -r "$T" "$WORK/private"   # 0700 directory of 0600 files, owned by root
    cp -r "$T" "$WORK/opendir" && chmod 755 "$WORK/opendir"   # the directory readable, the streams not
    for t in "$T" "$WORK/private" "$WORK/opendir"; do
      for cmd in info steps events verify triage env env-diff "dump --step 1 --batch inputs.0 -o /dev/null"; do
        timeout 30 setpriv --reuid=65534 --regid=65534 --clear-groups "$DLTRACE" $cmd "$t" >/dev/null 2>"$ERR"
        rc=$?
        [ "$rc" = 3 ] || fail "dltrace $cmd on an unreadable trace as nobody exited $rc, expected 3: $(cat "$ERR")"
        [ "$(wc -l <"$ERR")" = 1 ] || fail "dltrace $cmd as nobody: not one line: $(cat "$ERR")"
      done
    done
    chmod 700 "$WORK"
  fi
else
  cp -r "$T" "$WORK/perm" && chmod 000 "$WORK/perm/$P"
  expect 3 info "$WORK/perm"
  chmod 000 "$WORK/perm"
  expect 3 info "$WORK/perm"
fi

# --- usage
expect 2
expect 2 frobnicate "$T"
expect 2 info
expect 2 info "$T" --bogus
expect 2 info "$T" "$T"
expect 2 events "$T" --step x
expect 2 events "$T" --kind nonsense
# Issue 27: a negative step is a usage error, not a silent success.
expect 2 events "$T" --step -5
expect 2 dump "$T" --step -5 --batch inputs.0 -o "$WORK/x.npy"
# Issue 27: dump never writes into the trace it reads (it would replace a stream).
cp -r "$T" "$WORK/victim"
before=$(sha256sum "$WORK/victim"/launcher.dls)
expect 2 dump "$WORK/victim" --step 3 --batch inputs.0 -o "$WORK/victim/launcher.dls"
expect 2 dump "$WORK/victim" --step 3 --batch inputs.0 -o "$WORK/victim/new.npy"
[ "$(sha256sum "$WORK/victim"/launcher.dls)" = "$before" ] || fail "dump -o overwrote the trace it reads"
[ -e "$WORK/victim/new.npy" ] && fail "dump -o wrote into the trace it reads"
expect 2 dump "$T" --batch -o "$WORK/x.npy"
expect 2 dump "$T" --step 1 -o "$WORK/x.npy"
expect 2 dump "$T" --step 1 --batch
expect 0 --help
expect 0 info --help
expect 0 help dump
expect 0 --version
grep -q 'trace format 2\.0' "$OUT" || fail "--version does not name the trace format"

if [ "$failures" != 0 ]; then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "dltrace CLI: all checks passed"
