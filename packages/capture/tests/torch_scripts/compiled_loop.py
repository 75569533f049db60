"""A training loop over compiled code, written for the tests: a module compiled with
``torch.compile(model, backend=...)``, a loss function compiled as a decorator, a submodule
compiled in place with ``nn.Module.compile()``, and a graph break (``.item()`` in forward).
Paused and resumed anywhere, it must print byte for byte what an uninterrupted run prints."""

import os
import sys
import time

import torch
from torch import nn

BACKEND = sys.argv[1] if len(sys.argv) > 1 else "aot_eager"
torch.manual_seed(0)
torch.set_num_threads(1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.head = nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 1))
        self.head.compile(backend=BACKEND)

    def forward(self, x):
        h = torch.relu(self.a(x))
        if h.mean().item() > 0.3:  # a graph break
            h = h * 1.5
        return self.head(h)


@torch.compile(backend=BACKEND)
def loss_fn(pred, y):
    return ((pred - y) ** 2).mean()


net = Net()
model = torch.compile(net, backend=BACKEND)
opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
g = torch.Generator().manual_seed(1)
for step in range(24):
    x = torch.randn(32, 8, generator=g)
    loss = loss_fn(model(x), x.sum(dim=1, keepdim=True))
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item()!r}", flush=True)
    time.sleep(float(os.environ.get("STEP_SLEEP", "0.05")))
print("weights", repr(float(sum(p.detach().double().sum() for p in net.parameters()))))
print("same module", model._orig_mod is net, flush=True)
