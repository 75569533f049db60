"""A torchrun-style DDP training script (gloo, CPU), written as users write them: it knows
nothing of Portal. Launched by ``python -m portal.runtime run --nproc-per-node N``.

    ddp_train.py STEPS OUT_DIR [GROUPS] [HOLD@RANK]

Adam, dropout (each rank its own generator), small buckets (several all-reduces per backward,
from DDP's reducer), a model whose forward uses its layers in another order than they are
defined (the bucket layout DDP rebuilds differs from its initial one), a DistributedSampler
loader over a shuffled dataset, and a logged all-reduce of the loss. Rank 0 prints one line per
step; at the end every rank writes its parameters' SHA-256 and its log to OUT_DIR/rankR.json.
GROUPS "1": two groups made with new_group, {0, 1} and {1, 2} (three ranks), each
all-reducing a value every step; "2": DDP reduces on a group made with new_group (every rank),
not on the default one, and the program keeps a TCPStore client it writes to every step. HOLD@RANK: that rank also holds, for the whole run,
``socket`` (an open socket: its state can never be carried, so the ranks can never all pause)
or ``big`` (128 MiB of tensor: its part takes a while to write).
"""

import hashlib
import json
import os
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

steps, out = int(sys.argv[1]), Path(sys.argv[2])
groups_mode = sys.argv[3] if len(sys.argv) > 3 else "0"
subgroups = groups_mode == "1"
hold, _, hold_rank = (sys.argv[4] if len(sys.argv) > 4 else "@-1").partition("@")
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
extra = None
if rank == int(hold_rank):
    extra = socket.socket() if hold == "socket" else torch.ones(32 << 20)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c, self.d = (nn.Linear(12, 12) for _ in range(4))
        self.drop = nn.Dropout(0.2)

    def forward(self, x):
        return self.d(self.b(self.drop(torch.tanh(self.c(self.a(x))))))


torch.manual_seed(0)  # the same initial weights on every rank
data = TensorDataset(torch.randn(96, 12), torch.randn(96, 12))
# GROUPS "2": the model's gradients are reduced on a group of its own (every rank)
ddp_group = dist.new_group(list(range(world))) if groups_mode == "2" else None
# and the program keeps a store of its own (a client of the rendezvous), used every step
kept_store = None
if groups_mode == "2":
    kept_store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False
    )
# DDP_TRAIN_DEVICE=cuda: the model and batches on this rank's GPU (gloo all-reduces CUDA
# tensors too, so two ranks may share one GPU): the GPU check of a lent accelerator.
device = torch.device(os.environ.get("DDP_TRAIN_DEVICE", "cpu"))
if device.type == "cuda":
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
    torch.cuda.set_device(device)
model = DistributedDataParallel(Net().to(device), bucket_cap_mb=0.002, process_group=ddp_group)
torch.manual_seed(1 + rank)  # each rank's own dropout
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
sampler = DistributedSampler(data, shuffle=True, seed=3)
loader = DataLoader(data, batch_size=8, sampler=sampler)
held = {}
if subgroups:
    held = {"g01": dist.new_group([0, 1]), "g12": dist.new_group([1, 2])}
log = []
step = 0
epoch = 0
while step < steps:
    sampler.set_epoch(epoch)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = (model(x) - y).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        logged = loss.detach().clone()
        dist.all_reduce(logged)
        entry = f"step {step} epoch {epoch} loss {logged.item():.10f}"
        for name, group in held.items():
            if not isinstance(group, int):  # this rank is a member
                value = loss.detach().clone() * (2 if name == "g01" else 3)
                dist.all_reduce(value, group=group)
                entry += f" {name} {value.cpu().numpy().tobytes().hex()}"
        log.append(entry)
        if kept_store is not None:
            kept_store.set(f"test/rank{rank}", str(step))
        if rank == 0:
            print(entry, flush=True)
        time.sleep(0.01)  # a step takes a while, as real ones do
        step += 1
        if step == steps:
            break
    epoch += 1

digest = hashlib.sha256()
for p in model.parameters():
    digest.update(p.detach().cpu().numpy().tobytes())
out.mkdir(parents=True, exist_ok=True)
(out / f"rank{rank}.json").write_text(json.dumps({"log": log, "params": digest.hexdigest()}))
dist.destroy_process_group()
