"""A functional training loop (torch.func, torch 2.x): parameters in a dict of tensors, gradients
from a gradient transform, a hand-written SGD update, no optimizer and no backward(). argv[1]:

  grad              grads = torch.func.grad(loss_of)(params, x, y); the loss logged after the update
  grad-and-value    grads, loss = torch.func.grad_and_value(loss_of)(params, x, y)
  grad-aux          torch.func.grad(loss_of, has_aux=True): the loss comes back as the aux output
Dropout in the model: each step draws random numbers inside the transform. argv[2]: the number
of steps (8); argv[3], a step whose batch holds an Inf: its loss and every later one is NaN.
"""
import sys

import torch
import torch.nn.functional as F

variant = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 8
inf_at = int(sys.argv[3]) if len(sys.argv) > 3 else -1
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(16, 1))
params = {k: v.detach() for k, v in model.named_parameters()}
data = [(torch.randn(8, 8), torch.rand(8)) for _ in range(steps)]


def loss_of(p, x, y):
    return F.mse_loss(torch.func.functional_call(model, p, (x,)).squeeze(1), y)


def loss_and_aux(p, x, y):
    loss = loss_of(p, x, y)
    return loss, loss.detach()


for step, (x, y) in enumerate(data):
    if step == inf_at:
        x[0, 0] = float("inf")
    if variant == "grad":
        grads = torch.func.grad(loss_of)(params, x, y)
        params = {k: v - 0.05 * grads[k] for k, v in params.items()}
        loss = loss_of(params, x, y)  # logged after the update, outside the transform, grad enabled
    elif variant == "grad-and-value":
        grads, loss = torch.func.grad_and_value(loss_of)(params, x, y)
        params = {k: v - 0.05 * grads[k] for k, v in params.items()}
    elif variant == "grad-aux":
        grads, loss = torch.func.grad(loss_and_aux, has_aux=True)(params, x, y)
        params = {k: v - 0.05 * grads[k] for k, v in params.items()}
    else:
        sys.exit("unknown variant " + variant)
    print("step %d loss %.6f" % (step, loss.item()), flush=True)
