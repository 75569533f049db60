"""Evaluation inside ``torch.no_grad()`` and ``torch.autocast`` (CPU, bf16), paused inside the
block by the tests: the lines left in the block must still run in bf16, and the block's exit must
leave autocast as it found it (its nesting depth back to 0, so its cast cache is cleared)."""

import time

import torch

torch.manual_seed(0)
model = torch.nn.Linear(8, 8)
x = torch.randn(4, 8)
for i in range(12):
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        print("inside", i, flush=True)
        time.sleep(0.05)
        y = model(x)
        print(i, y.dtype, torch.is_autocast_enabled("cpu"), torch.is_grad_enabled(), flush=True)
    depth = torch.autocast_increment_nesting() - 1
    torch.autocast_decrement_nesting()
    print("after", torch.is_autocast_enabled("cpu"), depth, torch.is_grad_enabled(), flush=True)
