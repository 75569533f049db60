"""tensorboardX's SummaryWriter in a global (a multiprocessing queue, its feeder thread and a
writer thread), written at every step, with numpy (tensorboardX does not need torch)."""

import sys
import time

import numpy as np
from tensorboardX import SummaryWriter

writer = SummaryWriter("runs/tbx", flush_secs=1)
rng = np.random.default_rng(0)
w = np.zeros(4)
for step in range(int(sys.argv[1]) if len(sys.argv) > 1 else 60):
    w += rng.standard_normal(4) * 0.1
    writer.add_scalar("loss", float(w.sum()), step)
    writer.add_scalars("parts", {"a": float(w[0]), "b": float(w[1])}, step)
    writer.add_histogram("w", w, step)
    print("step", step, f"{float(w.sum()):.6f}", flush=True)
    time.sleep(0.03)
writer.close()
print("done")
