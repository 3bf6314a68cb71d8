"""A torchvision image classifier shaped like the ImageNet/CIFAR example scripts: train and
validate every epoch, save a checkpoint per epoch, export at the end.  --fail plants one of
the late failures preflight exists to find (each only after the training of epoch 0):

  eval-path   the validation index is opened only in evaluate(), from a path that is missing
  metric-key  the metric code looks up a key the metrics dict does not have
  ckpt-dir    the checkpoint directory cannot be written
  export      the final TorchScript export goes to a directory that does not exist
"""
import argparse
import json
import os

import torch
import torchvision
from torch import nn
from torch.utils.data import DataLoader
from torchvision import transforms

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--train-size", type=int, default=4000)
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--out", required=True)
parser.add_argument("--fail", default="none", choices=["none", "eval-path", "metric-key", "ckpt-dir", "export"])
args = parser.parse_args()

torch.manual_seed(0)
tf = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))])
train_set = torchvision.datasets.FakeData(size=args.train_size, image_size=(3, 32, 32), num_classes=10, transform=tf)
val_set = torchvision.datasets.FakeData(size=args.train_size // 4, image_size=(3, 32, 32), num_classes=10,
                                        transform=tf, random_offset=10**6)
train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
val_loader = DataLoader(val_set, batch_size=args.batch_size * 2)
model = torchvision.models.resnet18(num_classes=10)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
ckpt_dir = os.path.join(args.out, "ckpt")
if args.fail == "ckpt-dir":
    open(os.path.join(args.out, "ckpt-file"), "w").close()
    ckpt_dir = os.path.join(args.out, "ckpt-file", "ckpt")  # a regular file as a parent
os.makedirs(args.out, exist_ok=True)


def evaluate():
    model.eval()
    if args.fail == "eval-path":
        with open("/data/imagenet/val/index.json") as f:  # a cluster path left in the code
            json.load(f)
    correct = total = 0
    with torch.no_grad():
        for x, y in val_loader:
            correct += (model(x).argmax(1) == y).sum().item()
            total += len(y)
    metrics = {"top1": correct / total}
    return metrics["top5" if args.fail == "metric-key" else "top1"]


for epoch in range(args.epochs):
    model.train()
    for x, y in train_loader:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    sched.step()
    acc = evaluate()
    print("epoch %d loss %.4f top1 %.3f" % (epoch, loss.item(), acc), flush=True)
    if args.fail != "ckpt-dir":
        os.makedirs(ckpt_dir, exist_ok=True)
    torch.save({"epoch": epoch, "model": model.state_dict()}, os.path.join(ckpt_dir, "epoch%d.pt" % epoch))

model.eval()
export_dir = os.path.join(args.out, "missing-export-dir") if args.fail == "export" else args.out
torch.jit.trace(model, torch.zeros(1, 3, 32, 32)).save(os.path.join(export_dir, "model.ts"))
print("exported", flush=True)
