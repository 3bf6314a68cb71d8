"""Corrupt data: a truncated JSON annotation file."""
import json
import sys

with open(sys.argv[1]) as f:
    annotations = json.load(f)
print(len(annotations))
