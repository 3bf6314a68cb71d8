#!/usr/bin/env bash
# GPU checks in one command (docs/gpu.md). On a machine with a CUDA device:
#   1. records examples/gpu_train.py (CNN + SDPA transformer block with dropout, LR spike -> NaN)
#      and prints the kernel sequence captured: launches per step, host->device copies;
#   2. replays it to the NaN: bit-exact steps, launch sequences compared per step;
#   3. per-launch overhead on a launch-heavy loop (tiny torch.add kernels), with and without
#      dlrecord, and with CUPTI's driver-API callbacks alone (DLRR_CUPTI_RUNTIME=0), which must
#      record the same launches as both domains (3b);
#   4. the record overhead ratio on the job (whole process, and per step at steady state, also
#      with torch-op digests, driver-API callbacks only, --capture minimal), and the device
#      digest's cost per module output, fused kernel against torch ops (bench/gpu_digest_cost.py);
#   5. a one-rank NCCL DDP job under torchrun (docs/distributed.md): recorded with
#      --collectives full, replayed alone (--rank 0) to its NaN and with --all-ranks;
#   6. triage of a GPU-only failure (docs/triage.md): a job that runs out of GPU memory in a
#      training step is recorded and `dltrace triage` must name "GPU out of memory".
# Without a CUDA device it prints "no CUDA device: GPU checks skipped" and exits 0 (CI).
#
#   scripts/gpu_check.sh            build dir: $DLRR_BUILD or ./build (built if missing)
#   PYTHON=python3.12 scripts/gpu_check.sh
#   GPU_CHECK_OUT=DIR scripts/gpu_check.sh     keeps the reports and logs in DIR/gpu_check_files.tgz
# Last run: one H100 80GB HBM3, torch 2.11.0+cu130 (docs/gpu.md "What is verified").
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${DLRR_BUILD:-$ROOT/build}
PY=${PYTHON:-python3}
STEPS=${GPU_CHECK_STEPS:-40}
EXPLODE=${GPU_CHECK_EXPLODE_AT:-28}
LAUNCHES=${GPU_CHECK_LAUNCHES:-20000}

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "no CUDA device: GPU checks skipped"
  exit 0
fi
if [[ ! -x $BUILD/bin/dlrecord || ! -x $BUILD/bin/dlreplay ]]; then
  GEN=()
  command -v ninja >/dev/null && GEN=(-G Ninja)
  cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" >/dev/null
  cmake --build "$BUILD" -j"$(nproc)" >/dev/null
fi
BIN=$BUILD/bin
TMP=$(mktemp -d /tmp/dlrr-gpu-check.XXXXXX)
# GPU_CHECK_OUT=DIR keeps the reports and logs (not the traces) as DIR/gpu_check_files.tgz.
trap '[[ -n ${GPU_CHECK_OUT:-} ]] && (cd "$TMP" && tar czf "$GPU_CHECK_OUT/gpu_check_files.tgz" --exclude="*.trace" \
        --exclude=torchrun . 2>/dev/null); rm -rf "$TMP"' EXIT
JOB=("$PY" "$ROOT/examples/gpu_train.py" --steps "$STEPS" --explode-at "$EXPLODE" --require-cuda)
fail=0

"$PY" - <<'EOF'
import torch
p = torch.cuda.get_device_properties(0)
print("== device: %s, %d SMs, %.1f GiB; torch %s, CUDA %s, cuDNN %s" % (
    p.name, p.multi_processor_count, p.total_memory / 2**30, torch.__version__, torch.version.cuda,
    torch.backends.cudnn.version()))
EOF

echo "== 1. record: ${JOB[*]}"
t0=$(date +%s.%N)
if ! "${JOB[@]}" >"$TMP/plain.out"; then
  echo "   FAIL: the job itself failed (without dlrr)"
  exit 1
fi
t1=$(date +%s.%N)
"$BIN/dlrecord" -o "$TMP/gpu.trace" -- "${JOB[@]}" >"$TMP/rec.out" 2>"$TMP/rec.err" || true
t2=$(date +%s.%N)
sed 's/^/   /' "$TMP/rec.err" | grep -v '^   step ' || true
if ! cmp -s "$TMP/plain.out" "$TMP/rec.out"; then
  echo "   FAIL: the recorded job printed something else than the plain run (losses differ run to run?)"
  diff "$TMP/plain.out" "$TMP/rec.out" | head -5 | sed 's/^/   /'
  fail=1
fi
"$BIN/dltrace" events "$TMP/gpu.trace" --json >"$TMP/events.jsonl"
"$PY" - "$TMP/events.jsonl" <<'EOF' || fail=1
import collections, json, sys
launches, copies, h2d, names, runtime = collections.Counter(), collections.Counter(), 0, {}, {}
first = {}
for line in open(sys.argv[1]):
    e = json.loads(line)
    ev, kind = e["event"], e["kind"]
    if kind == "internedString":
        names[ev["internedString"]["id"]] = ev["internedString"]["text"]
    elif kind == "cudaLaunch":
        launches[ev["step"]] += 1
        first.setdefault(ev["step"], []).append(ev["cudaLaunch"])
    elif kind == "cudaMemcpy":
        copies[ev["step"]] += 1
        h2d += ev["cudaMemcpy"]["direction"] == "hostToDevice" and int(str(ev["cudaMemcpy"]["digest"]), 0) != 0
    elif kind == "runtimeInfo":
        for kv in ev["runtimeInfo"]["items"]:
            runtime[kv["key"]] = kv["value"]
print("   GPU capture: %s" % runtime.get("gpu.capture", "not started (CUDA never initialised?)"))
if not launches:
    print("   FAIL: no kernel launch captured")
    sys.exit(1)
steps = sorted(launches)
print("   kernel launches per step: " + " ".join("%d:%d" % (s, launches[s]) for s in steps))
print("   copies per step:          " + " ".join("%d:%d" % (s, copies[s]) for s in sorted(copies)))
print("   distinct kernels: %d; host->device copies digested: %d; outside steps: %s; dropped: %s" % (
    len(names), h2d, runtime.get("gpu.outside_steps", "?"), runtime.get("gpu.dropped", "?")))
for l in sorted(first[steps[0]], key=lambda l: l["seq"])[:5]:
    print("     step %d #%d %s grid (%d,%d,%d) block (%d,%d,%d)" % (steps[0], l["seq"], names.get(l["nameId"], "?")[:70],
          l["gridX"], l["gridY"], l["gridZ"], l["blockX"], l["blockY"], l["blockZ"]))
if len(steps) >= 3:
    same = len({launches[s] for s in steps[1:-1]}) == 1
    print("   launch count constant across steps 1..%d: %s" % (steps[-2], "yes" if same else "no"))
EOF

echo "== 2. replay to the NaN"
"$BIN/dlreplay" "$TMP/gpu.trace" --until nan --json >"$TMP/replay.json" 2>"$TMP/replay.err" || true
"$PY" - "$TMP/replay.json" <<'EOF' || fail=1
import json, sys
lines = [l for l in open(sys.argv[1]) if l.startswith("{")]
if not lines:
    print("   FAIL: dlreplay printed no report")
    sys.exit(1)
doc = json.loads(lines[-1])
r = doc["report"]
print("   outcome: %s (%s)" % (doc["outcome"], doc["message"]))
print("   bit-exact steps: %s of %s recorded; stopped at step %s" % (doc["verified_steps"], doc["recorded_steps"],
                                                                 r.get("stop.step", "?")))
print("   GPU capture in replay: %s" % r.get("gpu.capture", "?"))
print("   launch sequences: %s of %s checked steps match" % (r.get("launch.steps_matched", 0),
                                                           r.get("launch.steps_checked", 0)))
if "launch.divergence.detail" in r:
    print("   first differing launch: %s" % r["launch.divergence.detail"])
for w in r.get("warning", "").splitlines():
    print("   warning: %s" % w)
ok = doc["outcome"] == "reached" and "launch.divergence.step" not in r and "divergence.step" not in r
sys.exit(0 if ok else 1)
EOF

echo "== 3. per-launch overhead ($LAUNCHES tiny torch.add launches inside 10 training steps)"
bench() {
  "$@" "$PY" "$ROOT/examples/gpu_train.py" --launch-bench "$LAUNCHES" --require-cuda 2>/dev/null |
    awk '/^launch-bench/ {print $NF}'
}
plain_us=$(bench env)
rec_us=$(bench "$BIN/dlrecord" -q -o "$TMP/bench.trace" --)
drv_us=$(bench env DLRR_CUPTI_RUNTIME=0 "$BIN/dlrecord" -q -o "$TMP/bench-drv.trace" --)
"$PY" - "$plain_us" "$rec_us" "$drv_us" <<'EOF'
import sys
try:
    p, r, d = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
except ValueError:
    print("   FAIL: a launch-bench run printed no figure: %s" % " ".join(sys.argv[1:]))
    sys.exit(0)
print("   plain %.3f us/launch, recorded %.3f us/launch: +%.3f us per launch (%.2fx)" % (p, r, r - p, r / p))
print("   driver API callbacks only (DLRR_CUPTI_RUNTIME=0): %.3f us/launch: +%.3f us per launch (%.2fx)" % (
    d, d - p, d / p))
EOF

echo "== 3b. driver API callbacks only (DLRR_CUPTI_RUNTIME=0): the same launches recorded?"
DLRR_CUPTI_RUNTIME=0 "$BIN/dlrecord" -q -o "$TMP/drv.trace" -- "${JOB[@]}" >/dev/null 2>&1 || true
"$BIN/dltrace" events "$TMP/drv.trace" --json >"$TMP/drv.jsonl" || true
"$PY" - "$TMP/events.jsonl" "$TMP/drv.jsonl" <<'EOF' || fail=1
import collections, json, sys
def sequences(path):
    names, seq = {}, collections.defaultdict(list)
    for line in open(path):
        e = json.loads(line)
        ev = e["event"]
        if e["kind"] == "internedString":
            names[ev["internedString"]["id"]] = ev["internedString"]["text"]
        elif e["kind"] == "cudaLaunch":
            l = ev["cudaLaunch"]
            seq[ev["step"]].append((l["seq"], l["nameId"], l["gridX"], l["gridY"], l["gridZ"], l["blockX"],
                                    l["blockY"], l["blockZ"]))
    return {s: [(names.get(x[1], "?"),) + x[2:] for x in sorted(v)] for s, v in seq.items()}
both, drv = sequences(sys.argv[1]), sequences(sys.argv[2])
for step in sorted(set(both) | set(drv)):
    a, b = both.get(step, []), drv.get(step, [])
    if a != b:
        i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        print("   DIFFERENT at step %d launch %d: both domains %s; driver only %s (counts %d, %d)" % (
            step, i, a[i] if i < len(a) else "-", b[i] if i < len(b) else "-", len(a), len(b)))
        sys.exit(1)
print("   identical: %d steps, %d launches, names, grids and blocks" % (len(both), sum(map(len, both.values()))))
EOF

echo "== 4. record overhead on the job"
"$PY" - "$t0" "$t1" "$t2" <<'EOF'
import sys
t0, t1, t2 = map(float, sys.argv[1:])
print("   whole process: plain %.2f s, recorded %.2f s: ratio %.2fx (interpreter start and CUDA init included)" % (
    t1 - t0, t2 - t1, (t2 - t1) / (t1 - t0)))
EOF
# Steady state: ms per step from step 5 on (examples/gpu_train.py --timing), plain and recorded
# in turn, twice, no NaN; default capture.
TSTEPS=${GPU_CHECK_TIMING_STEPS:-150}
steady() {
  "$@" "${JOB[@]:0:2}" --steps "$TSTEPS" --require-cuda --timing 2>&1 >/dev/null | awk '/^timing steps/ {print $NF}'
}
p1=$(steady env); r1=$(steady "$BIN/dlrecord" -q -o "$TMP/t1.trace" --)
p2=$(steady env); r2=$(steady "$BIN/dlrecord" -q -o "$TMP/t2.trace" --)
o1=$(steady env DLRR_GPU_DIGEST=ops "$BIN/dlrecord" -q -o "$TMP/t3.trace" --)
d1=$(steady env DLRR_CUPTI_RUNTIME=0 "$BIN/dlrecord" -q -o "$TMP/t4.trace" --)
m1=$(steady "$BIN/dlrecord" -q --capture minimal -o "$TMP/t5.trace" --)
"$PY" - "$p1" "$r1" "$p2" "$r2" "$o1" "$d1" "$m1" <<'EOF'
import sys
try:
    p1, r1, p2, r2, o1, d1, m1 = map(float, sys.argv[1:])
except ValueError:
    print("   FAIL: no timing line: %s" % " ".join(sys.argv[1:]))
    sys.exit(0)
p = (p1 + p2) / 2
print("   steady state, ms per step (plain, recorded): %.3f %.3f | %.3f %.3f: ratio %.3fx %.3fx (goal <= 1.02x)" % (
    p1, r1, p2, r2, r1 / p1, r2 / p2))
print("   variants against the plain mean %.3f ms: digests by torch ops (DLRR_GPU_DIGEST=ops) %.3f (%.3fx); "
      "driver API callbacks only %.3f (%.3fx); --capture minimal %.3f (%.3fx)" % (p, o1, o1 / p, d1, d1 / p, m1, m1 / p))
EOF

echo "== 4b. device digest cost per module output"
LD_PRELOAD="$BUILD/lib/dlrr/libdlrr.so" "$PY" "$ROOT/bench/gpu_digest_cost.py" --calls 200 | sed 's/^/   /' || { echo "   FAIL: gpu_digest_cost"; fail=1; }

echo "== 5. distributed: one-rank NCCL DDP under torchrun, a NaN planted at step 3"
TR=("$PY" -m torch.distributed.run --rdzv_backend=c10d --rdzv_endpoint=localhost:0 --nnodes=1 --nproc_per_node=1
    --redirects 1 --tee 1 --log_dir "$TMP/torchrun" --monitor_interval 0.2)
DJOB=("$ROOT/examples/ddp_train.py" --device cuda --steps 6 --nan-rank 0 --nan-step 3)
if "$BIN/dlrecord" --collectives full -o "$TMP/dist.trace" -- "${TR[@]}" "${DJOB[@]}" >"$TMP/dist.out" 2>"$TMP/dist.err"; then
  grep '^dlrecord: trace' "$TMP/dist.err" | sed 's/^/   /'
  if "$BIN/dlreplay" "$TMP/dist.trace" --rank 0 >"$TMP/dist-r0.out" 2>"$TMP/dist-r0.err"; then
    grep -E '^dlreplay: (reached|  where)' "$TMP/dist-r0.err" | sed 's/^/   /'
  else
    echo "   FAIL: dlreplay --rank 0 exited $?"; tail -5 "$TMP/dist-r0.err" | sed 's/^/   /'; fail=1
  fi
  if "$BIN/dlreplay" "$TMP/dist.trace" --all-ranks >"$TMP/dist-all.out" 2>"$TMP/dist-all.err"; then
    grep -E '^dlreplay: (rank|every)' "$TMP/dist-all.err" | sed 's/^/   /'
  else
    echo "   FAIL: dlreplay --all-ranks exited $?"; tail -5 "$TMP/dist-all.err" | sed 's/^/   /'; fail=1
  fi
else
  echo "   FAIL: the recorded NCCL job failed"; tail -5 "$TMP/dist.err" | sed 's/^/   /'; fail=1
fi

echo "== 6. triage: CUDA out of memory in a training step"
cat >"$TMP/oom.py" <<'EOF'
import torch
model = torch.nn.Linear(64, 64).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    opt.zero_grad()
    loss = model(torch.randn(32, 64, device="cuda")).sum()
    loss.backward()
    opt.step()
    if step == 1:
        free, total = torch.cuda.mem_get_info()
        torch.empty(int(total * 2) // 4, dtype=torch.float32, device="cuda")  # twice the device
EOF
"$BIN/dlrecord" -o "$TMP/oom.trace" -- "$PY" "$TMP/oom.py" >/dev/null 2>"$TMP/oom.err" || true
if "$BIN/dltrace" triage "$TMP/oom.trace" --json >"$TMP/oom.json" 2>>"$TMP/oom.err" &&
   "$PY" - "$TMP/oom.json" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
print("   category: %s [%s]; %s" % (doc.get("category"), doc.get("dimension"), str(doc.get("summary", ""))[:120]))
text = json.dumps(doc)
for line in doc.get("evidence", []) if isinstance(doc.get("evidence"), list) else []:
    print("   evidence: %s" % str(line)[:160])
figures = "peak allocated" in text and "reserved" in text
print("   allocator's peak and reserved memory named: %s" % ("yes" if figures else "NO"))
sys.exit(0 if doc.get("category") == "gpu_out_of_memory" and figures else 1)
EOF
then :; else
  echo "   FAIL: triage did not name GPU out of memory"; tail -5 "$TMP/oom.err" | sed 's/^/   /'; fail=1
fi

if [[ $fail -ne 0 ]]; then
  echo "GPU checks: FAILED"
  exit 1
fi
echo "GPU checks: passed"
