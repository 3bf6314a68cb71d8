#!/bin/sh
# Cluster-style launcher for train.py: set up the environment, then exec
# the interpreter so the job keeps this process's pid (as srun/sbatch
# wrappers do).  All arguments are passed through:
#
#   examples/run_train.sh --data /tmp/exdata --workers 2
#
# Debian's python3 (torch lives there), not whatever python3 is on PATH.
PYTHONUNBUFFERED=1
# Show C++ frames in the traceback if torch raises from native code.
TORCH_SHOW_CPP_STACKTRACES=1
export PYTHONUNBUFFERED TORCH_SHOW_CPP_STACKTRACES

exec /usr/bin/python3 "$(dirname "$0")/train.py" "$@"
