"""One rank of a DDP job (gloo, CPU) that agrees on a pause with its peers through the ballot.

    python ballot_ranks.py RANK WORLD PORT STEPS PAUSE_AT_STEP SEED OUT [SKIP_RANK:SKIP_STEP]

Rank 0 hosts the TCPStore. Every rank trains a small DDP model with tiny buckets (several
all-reduces per backward, issued by DDP's reducer from C++). From step PAUSE_AT_STEP a pause is
due: a control thread publishes the rank's issued count (the default group's own counter) to
the ballot, and at each safe point (the top of a step, after its own random delay: the ranks
arrive skewed) the rank calls agree(). On "pause" it drains with a barrier and records where it
stood; the others must stand at the same count. SKIP_RANK does not join at SKIP_STEP (as if
its state could not be pickled there): its peers must see it inside the next collective, leave
and run on, and agree at a later step. Writes JSON to OUT.
"""

import json
import random
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from _leave import leave_together
from torch.nn.parallel import DistributedDataParallel as DDP

from portal.capture.distributed.ballot import Ballot, agree
from portal.capture.distributed.counts import issued_counts

rank, world, port, steps, pause_at, seed = (int(a) for a in sys.argv[1:7])
out = sys.argv[7]
skip_rank, skip_step = (int(x) for x in (sys.argv[8] if len(sys.argv) > 8 else "-1:-1").split(":"))
torch.manual_seed(0)
store = dist.TCPStore("127.0.0.1", port, world, rank == 0, timedelta(seconds=60))
dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
group = dist.group.WORLD
model = DDP(torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(4)]), bucket_cap_mb=0.001)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
skew = random.Random(seed * 100 + rank)
ballot = Ballot(store, world, key="portal/ballot/1")
if rank == 0:
    ballot.open()
dist.barrier()
due = threading.Event()
stop = threading.Event()


def publish() -> None:
    while not stop.is_set():
        if due.is_set():
            ballot.publish_issued(rank, issued_counts([group]))
        time.sleep(0.001)


publisher = threading.Thread(target=publish, daemon=True)
publisher.start()
result = {"rank": rank, "paused": None, "left": 0}
for step in range(steps):
    if step >= pause_at and (rank, step) != (skip_rank, skip_step):
        due.set()
        time.sleep(skew.random() * 0.01)
        count = issued_counts([group])
        ballot.publish_issued(rank, count)
        asked = time.perf_counter()
        outcome = agree(ballot, rank, count, deadline=time.monotonic() + 20)
        result.setdefault("agree_s", []).append(time.perf_counter() - asked)
        if outcome == "pause":
            dist.barrier()  # the drain: symmetric, as every rank agreed
            result["paused"] = {"step": step, "count": list(count)}
            break
        result["left"] += 1
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(step))
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
result["issued"] = list(issued_counts([group]))
result["python_calls"] = 1  # the one dist.barrier() above; DDP's own are counted by the group
stop.set()
publisher.join()  # no store call may be in flight when the store goes
with open(out, "w") as fh:
    json.dump(result, fh)
dist.destroy_process_group()
leave_together(store, rank, world, "portal/test")
