"""A training loop whose computation is non-deterministic from a given step on, on purpose: a
`Jitter` module adds noise from a generator seeded by the clock (time.time_ns(), which no replay
serves), so two computations of one step from the same state never agree, while every step
before it is deterministic. Usage: nondeterministic_step.py STEPS JITTER_FROM [NAN_AT]; an Inf in
the target of step NAN_AT makes that step's loss non-finite, every module output finite (a
failure for --check whose replay computes the jittered output first)."""
import sys
import time

import torch

steps, jitter_from = int(sys.argv[1]), int(sys.argv[2])
nan_at = int(sys.argv[3]) if len(sys.argv) > 3 else -1


class Jitter(torch.nn.Module):
    active = False

    def forward(self, x):
        if not self.active:
            return x
        g = torch.Generator().manual_seed(time.time_ns())  # fresh every call: no two runs alike
        return x + 1e-3 * torch.randn(x.shape, generator=g)


torch.manual_seed(0)
jitter = Jitter()
model = torch.nn.Sequential(torch.nn.Linear(8, 16), jitter, torch.nn.Tanh(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
data = [(torch.randn(8, 8), torch.randn(8, 1)) for _ in range(steps)]
for step, (x, y) in enumerate(data):
    jitter.active = step >= jitter_from
    if step == nan_at:
        y = y.clone()
        y[0, 0] = float("inf")
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    print("step %d loss %.6f" % (step, loss.item()), flush=True)
