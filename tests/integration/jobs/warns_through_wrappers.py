"""A job that triggers warnings raised with stacklevel > 1 inside functions the recorder wraps:
torch's "duplicate parameters" warning from an optimizer's __init__ (stacklevel=3), and on torch
2.x the FutureWarning of torch.cuda.amp.GradScaler(...) (typing_extensions.deprecated). Each
must name the same line recorded or not. Prints "done"; the warnings go to stderr.
"""
import warnings

import torch

# These two shown every time; not ResourceWarning, whose texts name random temporary directories.
warnings.simplefilter("always", UserWarning)
warnings.simplefilter("always", FutureWarning)
p = torch.nn.Parameter(torch.zeros(2))
opt = torch.optim.SGD([p, p], lr=0.1)
scaler = torch.cuda.amp.GradScaler(enabled=False)
print("done")
