"""Illegal argument: the launch script passes a value argparse rejects (exit status 2)."""
import argparse

parser = argparse.ArgumentParser(prog="bad_args.py")
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()
print(args)
