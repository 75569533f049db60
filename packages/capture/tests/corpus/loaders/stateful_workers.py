"""torchdata's StatefulDataLoader read by two worker processes, in the two shapes pre-training
loaders have: ``stream``, an IterableDataset of shards whose position each worker's copy keeps
(and reports through ``state_dict``, torchdata's Stateful protocol); ``shuffled``, a map-style
dataset shuffled each epoch. A model trained on it, two epochs."""

import os
import sys
import time

import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info
from torchdata.stateful_dataloader import StatefulDataLoader


class Shards(IterableDataset):
    """``shards`` shards of ``size`` samples, split between the workers; a sample is drawn from
    a generator seeded by its shard, so it depends only on where it lies."""

    def __init__(self, shards: int, size: int) -> None:
        self.shards, self.size = shards, size
        self.done = 0  # samples this copy has yielded (in a worker: that worker's)

    def state_dict(self) -> dict[str, int]:
        return {"done": self.done}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.done = state["done"]

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        mine = [s for s in range(self.shards) if s % workers == worker]
        while self.done < len(mine) * self.size:
            shard, offset = divmod(self.done, self.size)
            g = torch.Generator().manual_seed(1000 * mine[shard] + offset)
            self.done += 1
            yield torch.randn(8, generator=g), mine[shard]


class Table(Dataset):
    def __init__(self, n: int) -> None:
        self.x = torch.randn(n, 8, generator=torch.Generator().manual_seed(7))

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], i


shape = sys.argv[1] if len(sys.argv) > 1 else "stream"
torch.manual_seed(0)
if shape == "stream":
    data = Shards(shards=6, size=10)
    loader = StatefulDataLoader(data, batch_size=4, num_workers=2)
else:
    loader = StatefulDataLoader(Table(60), batch_size=4, shuffle=True, num_workers=2)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
step = 0
for epoch in range(2):
    if shape == "stream":
        data.done = 0  # a new pass over the shards (the workers' copies start from this one)
    for x, where in loader:
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("step", step, epoch, where.tolist(), f"{loss.item():.8f}", flush=True)
        step += 1
        time.sleep(float(os.environ.get("STEP_SLEEP", "0.05")))
print("done", [f"{p:.8f}" for p in model.weight.flatten().tolist()])
