"""The job bench_ranks.py pauses: a DDP training loop (gloo, CPU) whose ranks together hold
STATE_MB of tensors, or the same loop in one process holding all of it (``single``).

    ranks_job.py ddp|single STEPS STATE_MB

Prints ``step N`` each step (rank 0) and, at the end, ``loop_seconds S``: the loop's own time,
start-up left out (what the cost of Portal while no pause is pending is measured on).
"""

import sys
import time

import torch
from torch import nn

mode, steps, state_mb = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
torch.set_num_threads(1)
rank, world = 0, 1
if mode == "ddp":
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 64))
if mode == "ddp":
    model = DistributedDataParallel(model, bucket_cap_mb=0.05)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
held = torch.ones(int(state_mb * (1 << 20) / 4 / world))  # this rank's share of the state
started = time.perf_counter()
for step in range(steps):
    x = torch.randn(32, 64)
    loss = (model(x) - x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    held[step % held.numel()] += 1.0
    if rank == 0:
        print(f"step {step}", flush=True)
if rank == 0:
    print(f"loop_seconds {time.perf_counter() - started:.6f}", flush=True)
if mode == "ddp":
    dist.destroy_process_group()  # a rank that exits with its group open may abort at exit
