"""Library not found: a job written for a GPU machine, started where the installed torch has no
CUDA (a CPU build). Only a CPU-only torch produces it; on a CUDA build the test skips."""
import torch

model = torch.nn.Linear(4, 2)
model = model.cuda()
