"""Path not found: the validation file was never uploaded (DATA_ROOT/val.json); the job
first looks for a cached split and a checkpoint to resume from, which are missing too."""
import json
import os
import sys

root = sys.argv[1]
if not os.path.exists(os.path.join(root, "cache", "split.json")):
    print("no cached split; reading the raw files")
resume = os.path.join(root, "checkpoints", "last.pt")
print("resume from", resume if os.path.isfile(resume) else "scratch")
with open(os.path.join(root, "val.json")) as f:
    val = json.load(f)
print(len(val))
