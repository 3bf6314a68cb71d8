"""Permission denied: the job's user may not read its input (a root-only file)."""
import sys

with open(sys.argv[1]) as f:
    print(f.read())
