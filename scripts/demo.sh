#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: set up, build, record the bundled example
# training job (its loss turns NaN mid-run), then delete its dataset and replay the trace to
# the NaN, stopping right before the module that produced it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
PY=/usr/bin/python3
work=$(mktemp -d /tmp/dlrr-demo-XXXXXX)
echo "== preparing the example dataset in $work/data"
$PY examples/prepare_data.py --out "$work/data"
echo "== recording: dlrecord -o $work/run.trace -- $PY examples/train.py --data $work/data"
build/bin/dlrecord -o "$work/run.trace" -- $PY examples/train.py --data "$work/data" | tail -n 5
echo "== the trace"
build/bin/dltrace info "$work/run.trace"
echo "== deleting the dataset, then replaying to the NaN"
rm -rf "$work/data"
build/bin/dlreplay "$work/run.trace" --until nan
echo "== done: the trace is in $work/run.trace"
