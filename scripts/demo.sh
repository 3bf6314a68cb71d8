#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: set up, build and install the tools (on PATH in
# /usr/local/bin; tests are not built), record the bundled example training job (its loss
# turns NaN mid-run), then delete its dataset and replay the trace to the NaN, stopping right
# before the module that produced it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/install.sh /usr/local
export PATH=/usr/local/bin:$PATH
PY=/usr/bin/python3  # Debian's, with torch: the job must run under a Python that has it
work=$(mktemp -d /tmp/dlrr-demo-XXXXXX)
echo "== preparing the example dataset in $work/data"
$PY examples/prepare_data.py --out "$work/data"
echo "== recording: dlrecord -o $work/run.trace -- $PY examples/train.py --data $work/data"
# The job's last lines, then dlrecord's summary (its last line: written after the job ended).
dlrecord -o "$work/run.trace" -- $PY examples/train.py --data "$work/data" > "$work/record.log" 2>&1
tail -n 6 "$work/record.log"
echo "== what happened: dltrace info $work/run.trace"
dltrace info "$work/run.trace"
echo "== why, and what to do: dltrace triage $work/run.trace"
dltrace triage "$work/run.trace"
echo "== a page to look at: dltrace report $work/run.trace -o $work/report.html"
dltrace report "$work/run.trace" -o "$work/report.html"
echo "== deleting the dataset, then replaying to the NaN"
rm -rf "$work/data"
dlreplay "$work/run.trace" --until nan
echo "== done: the trace is in $work/run.trace, the report in $work/report.html"
echo "   to stop at the NaN in a debugger: dlreplay $work/run.trace --until nan --debug pdb"
