"""Killed from outside: the job is terminated (SIGTERM) while it waits."""
import sys
import time

print("ready", flush=True)
sys.stdout.flush()
time.sleep(60)
