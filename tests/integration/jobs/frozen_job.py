"""Fine-tuning with a frozen part, for snapshot dedup under a budget (test_budget_dedup.py):
a frozen embedding table (1 MiB) and a frozen projection feed a trainable head (about 260 KiB
of parameters, as much again of gradients); only the head changes between snapshots. Usage: frozen_job.py STEPS [resnet18 | progress]; `progress`: print
"step K" after each step (for a kill at a chosen step); `resnet18`: torchvision's
resnet18 (no weights downloaded) frozen but for its fc layer, on 32x32 images, batch 8 (the
measurement of docs/performance.md). Prints the final loss."""
import sys

import torch

torch.manual_seed(0)
steps = int(sys.argv[1])
if sys.argv[2:] == ["resnet18"]:
    import torchvision

    model = torchvision.models.resnet18(num_classes=10)
    for name, p in model.named_parameters():
        p.requires_grad_(name.startswith("fc."))
    model.eval()  # a frozen backbone: its batch-norm statistics do not move either

    def batch(i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(8, 3, 32, 32, generator=g), torch.randint(0, 10, (8,), generator=g)
else:
    emb = torch.nn.Embedding(4096, 64)
    proj = torch.nn.Linear(64, 64)
    for p in list(emb.parameters()) + list(proj.parameters()):
        p.requires_grad_(False)
    model = torch.nn.Sequential(emb, proj, torch.nn.Flatten(), torch.nn.Linear(4 * 64, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 4))

    def batch(i):
        g = torch.Generator().manual_seed(i)
        return torch.randint(0, 4096, (16, 4), generator=g), torch.randint(0, 4, (16,), generator=g)

opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.05)
for step in range(steps):
    x, y = batch(step)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if sys.argv[2:] == ["progress"]:
        print("step %d" % step, flush=True)
print("loss %.6f" % loss.item(), flush=True)
