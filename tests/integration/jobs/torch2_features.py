"""A small training job using one torch 2.x feature (argv[1]), for record and replay on torch 2.x.

  adamw-foreach / adamw-fused   AdamW with the multi-tensor or the fused CPU kernel
  autocast-bf16                 forward under torch.amp.autocast('cpu', dtype=torch.bfloat16)
  sdpa                          a self-attention layer through scaled_dot_product_attention
  numpy-rng                     a Dataset drawing from np.random.default_rng (numpy 2), DataLoader
                                with two workers (the batches are recorded after collation)
  persistent-workers            the same with persistent_workers=True, two epochs
  numpy-batches                 a DataLoader whose collate_fn yields numpy arrays and a numpy scalar
  compile                       the model under torch.compile (inductor on CPU)
  compile-nan                   forward and loss under torch.compile (inductor compiles the backward
                                too); an Inf in step 5's batch makes the loss, gradients and
                                parameters NaN
  compile-step-nan              the whole step (zero_grad, forward, loss, backward(), optimizer.step())
                                in one torch.compile'd function; the same Inf at step 5
  func-grad                     torch.func.grad + functional_call, parameters updated by hand
"""
import sys

import numpy as np
import torch
import torch.nn.functional as F

feature = sys.argv[1]
torch.manual_seed(0)


class Attention(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, 1)

    def forward(self, x):  # x: (batch, seq, d)
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1, is_causal=True)
        return self.out(y.mean(dim=1))


class Draws(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        rng = np.random.default_rng()  # unseeded: fresh entropy per sample
        x = rng.standard_normal(8).astype(np.float32)
        return x, np.float32(x.sum() > 0)


if feature == "sdpa":
    model = Attention(8)
else:
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(16, 1))
if feature in ("adamw-foreach", "adamw-fused"):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, **{feature.split("-")[1]: True})
elif feature != "func-grad":  # functional training keeps its parameters in a dict, no optimizer
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

if feature == "numpy-rng":
    batches = torch.utils.data.DataLoader(Draws(), batch_size=8, num_workers=2)
elif feature == "persistent-workers":
    loader = torch.utils.data.DataLoader(Draws(), batch_size=16, num_workers=2, persistent_workers=True)
    batches = (b for epoch in range(2) for b in loader)  # lazily: one batch per step
elif feature == "numpy-batches":
    stack = lambda items: (np.stack([x for x, _ in items]), np.array([y for _, y in items]), np.float32(len(items) / 8))
    batches = ((torch.from_numpy(x), torch.from_numpy(y) * w)  # w: a numpy scalar (numpy.float32)
               for x, y, w in torch.utils.data.DataLoader(Draws(), batch_size=8, collate_fn=stack))
else:
    batches = [(torch.randn(8, 4, 8) if feature == "sdpa" else torch.randn(8, 8), torch.rand(8)) for _ in range(8)]

if feature == "compile":
    model = torch.compile(model)
if feature == "compile-nan":
    @torch.compile
    def forward_loss(x, y):
        return F.mse_loss(model(x).squeeze(1), y)
    for step, (x, y) in enumerate(batches):
        if step == 5:
            x = x.clone()
            x[0, 0] = float("inf")
        opt.zero_grad()
        loss = forward_loss(x, y)
        loss.backward()
        opt.step()
        print("step %d loss %.6f" % (step, loss.item()), flush=True)
    sys.exit(0)
if feature == "compile-step-nan":
    @torch.compile
    def train_step(x, y):
        opt.zero_grad()
        loss = F.mse_loss(model(x).squeeze(1), y)
        loss.backward()
        opt.step()
        return loss
    for step, (x, y) in enumerate(batches):
        if step == 5:
            x = x.clone()
            x[0, 0] = float("inf")
        loss = train_step(x, y)
        weights = sum(p.detach().double().sum().item() for p in model.parameters())
        print("step %d loss %.6f weights %s" % (step, loss.item(), weights.hex()), flush=True)
    sys.exit(0)
if feature == "func-grad":
    params = {k: v.detach() for k, v in model.named_parameters()}
    def loss_of(p, x, y):
        return F.mse_loss(torch.func.functional_call(model, p, (x,)).squeeze(1), y)
    for step, (x, y) in enumerate(batches):
        grads = torch.func.grad(loss_of)(params, x, y)
        params = {k: v - 0.05 * grads[k] for k, v in params.items()}
        print("step %d loss %.6f" % (step, loss_of(params, x, y).item()), flush=True)
    sys.exit(0)

for step, (x, y) in enumerate(batches):
    opt.zero_grad()
    if feature == "autocast-bf16":
        with torch.amp.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
        loss = F.mse_loss(out.float().squeeze(1), y)
    else:
        loss = F.mse_loss(model(x).squeeze(1), y)
    loss.backward()
    opt.step()
    print("step %d loss %.6f" % (step, loss.item()), flush=True)
