"""Unexpected encoding: UTF-8 captions read as ASCII."""
import sys

with open(sys.argv[1], encoding="ascii") as f:
    captions = f.read().splitlines()
print(len(captions))
