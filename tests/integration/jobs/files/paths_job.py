"""Path cases the libc layer got wrong in replay (issue 27, item 6): a symlink the job makes to
a directory is listed through and then removed (os.remove of the link, not EISDIR); the job
chdirs into a directory it made and opens ../cfg.txt. Prints what it saw, so the record and
the replay can be compared. Trains a few steps (a DataLoader) so replay has steps to verify."""
import os

import torch
import torch.nn as nn

torch.manual_seed(0)
ds = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,)))
model = nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in torch.utils.data.DataLoader(ds, batch_size=8):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()

os.symlink(os.path.abspath("datadir"), "link")
print("link", os.path.islink("link"), os.path.isdir("link"), sorted(os.listdir("link")))
os.remove("link")  # the link, not the directory (replay once said EISDIR)
print("removed", os.path.exists("datadir/a.txt"))
os.mkdir("made")
os.chdir("made")
with open("../cfg.txt") as f:
    print("cfg", f.read())
print("done")
