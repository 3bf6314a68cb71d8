"""Type mismatch: an int where a path component is expected."""
import os

shard = 3
print(os.path.join("/data/shards", shard))
