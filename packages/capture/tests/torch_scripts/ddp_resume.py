"""One rank of a small DDP training run (gloo, CPU): run plainly, pause at a step and write its
part, or resume from its part in a new process.

    python ddp_resume.py plain|pause|resume RANK WORLD PORT STEPS PAUSE_STEP PARTS OUT [LAYOUT]
        [SUBGROUPS]

The model's forward uses its layers in another order than they are defined, and its buckets
are small, so the layout DDP rebuilds after its first backward is not its initial one. Adam,
dropout (the rank's own generator state travels) and a logged all-reduce of the loss. A part is
the rank's state pickled by Portal's checkpoint pickler with its torch reducers and DDP's
(portal.capture.distributed.ddp); LAYOUT "initial" drops the recorded bucket layout. OUT gets
the rank's per-step logged loss and the SHA-256 of its parameters at the end, as JSON.
SUBGROUPS "1" (three ranks): the program also makes two groups with new_group, {0, 1} and
{1, 2}, all-reduces a value on each it belongs to every step, and holds both in its state; they
travel as "group #k of the log" and the resumed rank replays the log before its state loads.
"""

import hashlib
import json
import pickle
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from _leave import leave_together
from torch import nn

from portal.capture import _plugins
from portal.capture.distributed import ddp as ddp_capture
from portal.capture.distributed import groups as group_log
from portal.capture.pickler import dumps, resolve_reducers

mode = sys.argv[1]
rank, world, port, steps, pause_step = (int(a) for a in sys.argv[2:7])
parts, out = Path(sys.argv[7]), Path(sys.argv[8])
layout = sys.argv[9] if len(sys.argv) > 9 else "recorded"
subgroups = len(sys.argv) > 10 and sys.argv[10] == "1"
torch.set_num_threads(1)
store = dist.TCPStore("127.0.0.1", port, world, rank == 0, timedelta(seconds=60))
if mode == "resume":
    part = pickle.loads((parts / f"rank{rank}.part").read_bytes())
    # The groups first, on the new rendezvous: the state refers to them.
    group_log.replay(part["groups"], backend="gloo", store=store, rank=rank, world_size=world)
else:
    group_log.record()
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c, self.d = (nn.Linear(24, 24) for _ in range(4))
        self.drop = nn.Dropout(0.2)

    def forward(self, x):
        return self.d(self.b(self.drop(torch.tanh(self.c(self.a(x))))))


def leave(code: int) -> None:
    """End this rank once no rank needs the store rank 0 hosts (see _leave)."""
    dist.destroy_process_group()
    leave_together(store, rank, world, f"portal/test/{mode}")
    sys.exit(code)


def batch(step: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(16, 24, generator=g)


log: list[str] = []
held: dict = {}
if mode == "resume":
    state = pickle.loads(part["data"], buffers=part["buffers"])
    model, optimizer, first = state["model"], state["optimizer"], state["step"]
    torch.set_rng_state(state["rng"])
    log, held = state["log"], state["held"]
else:
    torch.manual_seed(0)  # the same initial weights on every rank
    model = nn.parallel.DistributedDataParallel(Net(), bucket_cap_mb=0.004)
    torch.manual_seed(1 + rank)  # each rank's own dropout
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    first = 0
    if subgroups:
        held = {"g01": dist.new_group([0, 1]), "g12": dist.new_group([1, 2])}

for step in range(first, steps):
    if mode == "pause" and step == pause_step:
        dist.barrier()  # the drain: every rank agreed on this step
        reducers = resolve_reducers(
            {
                **_plugins.load_reducers(),
                "torch.nn.parallel.distributed.DistributedDataParallel": ddp_capture.reduce_ddp,
                "torch.distributed.distributed_c10d.ProcessGroup": group_log.reduce_group,
            }
        )
        if layout == "initial":
            reducers[nn.parallel.DistributedDataParallel] = lambda m: (
                ddp_capture.rebuild_ddp,
                (m.__getstate__(), None),
            )
        keep = {
            "model": model,
            "optimizer": optimizer,
            "step": step,
            "rng": torch.get_rng_state(),
            "log": log,
            "held": held,
        }
        data, buffers, _ = dumps(keep, namespaces={}, reducers=reducers)
        blob = {
            "data": data,
            "buffers": [bytes(memoryview(b)) for b in buffers],
            "groups": group_log.record(),
        }
        parts.mkdir(parents=True, exist_ok=True)
        (parts / f"rank{rank}.part").write_bytes(pickle.dumps(blob))
        dist.barrier()
        leave(75)
    loss = model(batch(step)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    logged = loss.detach().clone()
    dist.all_reduce(logged)
    log.append(logged.numpy().tobytes().hex())
    for name, group in held.items():
        if not isinstance(group, int):  # this rank is a member
            value = loss.detach().clone() * (2 if name == "g01" else 3)
            dist.all_reduce(value, group=group)
            log.append(f"{name}:{value.numpy().tobytes().hex()}")

digest = hashlib.sha256()
for p in model.parameters():
    digest.update(p.detach().numpy().tobytes())
out.write_text(json.dumps({"log": log, "params": digest.hexdigest()}))
dist.barrier()
leave(0)
