"""A data-parallel training job of torchrun's shape (gloo, CPU): run by `portal run
--nproc-per-node 2` in the tests, and by torchrun itself for the reference. Rank 0 prints each
step's all-reduced loss; the last line is a digest of rank 0's parameters."""
import hashlib
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(
    nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Dropout(0.1), nn.Linear(16, 1)),
    bucket_cap_mb=0.001,
)
torch.manual_seed(10 + rank)
optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
for step in range(steps):
    x = torch.randn(16, 8)
    loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    logged = loss.detach().clone()
    dist.all_reduce(logged)
    if rank == 0:
        print(f"step {step} loss {logged.item():.8f}", flush=True)
    time.sleep(0.02)
# repr of a float is exact (it reads back as the same bits): the digest is of the exact values
digest = hashlib.sha256(repr([p.detach().tolist() for p in model.parameters()]).encode())
if rank == 0:
    print("params", digest.hexdigest())
dist.destroy_process_group()
