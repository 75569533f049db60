"""A SummaryWriter in a global (a writer thread and its queue), written at every step."""

import sys
import time

import torch
from torch.utils.tensorboard import SummaryWriter

writer = SummaryWriter("runs/exp", flush_secs=1)
torch.manual_seed(0)
w = torch.zeros(4)
for step in range(int(sys.argv[1]) if len(sys.argv) > 1 else 60):
    w += torch.randn(4) * 0.1
    writer.add_scalar("loss", float(w.sum()), step)
    writer.add_scalars("parts", {"a": float(w[0]), "b": float(w[1])}, step)
    print("step", step, f"{float(w.sum()):.6f}", flush=True)
    time.sleep(0.03)
writer.close()
print("done")
