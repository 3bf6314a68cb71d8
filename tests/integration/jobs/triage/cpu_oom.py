"""CPU out of memory: a buffer larger than the job's memory limit (run under ulimit -v)."""
import torch

x = torch.ones(1000)
print("allocating")
big = torch.empty(16 * 1024 ** 3 // 4, dtype=torch.float32)  # 16 GiB
print(big.shape, x.sum())
