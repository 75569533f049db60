"""Two ranks (gloo, CPU) holding torch.distributed objects as a program may: the default group,
and an async all-reduce's Work. Rank 0 issues the all-reduce while rank 1 holds back, so rank 0's
Work is in flight: its reducer must defer the pause. Once rank 1 joins and rank 0 waited, the
Work travels as completed; the group travels as "the default group". Writes JSON to OUT.

    python held_objects.py RANK PORT OUT
"""

import json
import pickle
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from _leave import leave_together

from portal.capture import _plugins
from portal.capture.distributed import groups, objects
from portal.capture.pickler import dumps, resolve_reducers
from portal.core.specs import WaitForSafePoint

rank, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
store = dist.TCPStore("127.0.0.1", port, 2, rank == 0, timedelta(seconds=60))
dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
reducers = resolve_reducers(
    {
        **_plugins.load_reducers(),
        "torch.distributed.distributed_c10d.Work": objects.reduce_work,
        "torch.distributed.distributed_c10d.ProcessGroup": groups.reduce_group,
    }
)
seen = {}
tensor = torch.full((4,), float(rank + 1))
if rank == 0:
    work = dist.all_reduce(tensor, async_op=True)  # rank 1 has not issued it yet
    try:
        dumps({"work": work}, namespaces={}, reducers=reducers)
        seen["in_flight"] = "pickled"
    except WaitForSafePoint as wait:
        seen["in_flight"] = str(wait)
        seen["ready_before"] = wait.ready() if wait.ready else None
    store.set("rank0/tried", "1")
    work.wait()
    seen["ready_after"] = work.is_completed()
    data, buffers, _ = dumps(
        {"work": work, "group": dist.group.WORLD}, namespaces={}, reducers=reducers
    )
    back = pickle.loads(data, buffers=buffers)
    seen["completed"] = back["work"].wait() and back["work"].is_completed()
    seen["result"] = [t.tolist() for t in back["work"].result()]
    seen["group_is_default"] = back["group"] is dist.group.WORLD
else:
    store.wait(["rank0/tried"])
    dist.all_reduce(tensor)
with open(out, "w") as fh:
    json.dump(seen, fh)
dist.barrier()
dist.destroy_process_group()
leave_together(store, rank, 2, "portal/test")
