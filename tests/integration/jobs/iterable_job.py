"""An IterableDataset job for bounded traces (test_bounded_stream.py): each of 2 DataLoader
workers streams its share of the .npy shards in DATA_DIR (made on first use), adds random noise
(torch's RNG in the worker) and yields samples; a small MLP. Its batches cannot be re-made by
reference (no sample indices), so dlrecord --window keeps them by value and says so.
Usage: iterable_job.py DATA_DIR STEPS; `iterable_job.py DATA_DIR make` writes the shards."""
import os
import sys

import numpy as np
import torch

torch.manual_seed(3)
data = sys.argv[1]
if sys.argv[2] == "make":
    os.makedirs(data)
    rnd = np.random.RandomState(0)
    for s in range(4):
        np.save(os.path.join(data, "shard%d.npy" % s), rnd.randn(64, 9).astype(np.float32))
    sys.exit(0)
steps = int(sys.argv[2])


class Shards(torch.utils.data.IterableDataset):
    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        names = sorted(os.listdir(data))
        if info is not None:
            names = names[info.id::info.num_workers]
        for name in names:
            rows = np.load(os.path.join(data, name))
            for row in rows:
                x = torch.from_numpy(row[:8].copy()) + 0.01 * torch.randn(8)
                yield x, torch.tensor(int(row[8] > 0))


loader = torch.utils.data.DataLoader(Shards(), batch_size=8, num_workers=2)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
step = 0
while step < steps:
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step >= steps:
            break
print("loss %.6f" % loss.item(), flush=True)
