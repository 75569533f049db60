"""A pre-training loop in llama2.c's shape, written for the tests: an IterableDataset whose
``__iter__`` generator shuffles token shards with its own ``random.Random``, maps each shard with
``np.memmap`` and yields (x, y) windows; a DataLoader over it with ``pin_memory=True`` and no
workers; a generator of the script's own around the loader, advanced with ``next()`` by the loop.
Paused anywhere and resumed, it must print byte for byte what an uninterrupted run prints."""

import glob
import logging
import os
import random
import time

import numpy as np
import torch
from torch import nn

SEQ, VOCAB, BATCH, STEPS = 16, 64, 4, 30

logging.basicConfig(filename="train.log", filemode="w", level=logging.INFO, format="%(message)s")
log = logging.getLogger("train")

if not glob.glob("shards/*.bin"):  # the data, made once in the job's directory
    os.makedirs("shards", exist_ok=True)
    tokens = np.random.default_rng(5).integers(0, VOCAB, size=3 * 40 * (SEQ + 1), dtype=np.uint16)
    for k, part in enumerate(np.split(tokens, 3)):
        part.tofile(f"shards/data{k:02d}.bin")


class PretokDataset(torch.utils.data.IterableDataset):
    def __init__(self, max_seq_len):
        super().__init__()
        self.max_seq_len = max_seq_len

    def __iter__(self):
        worker_info = torch.utils.data.get_worker_info()
        seed = 42 + (worker_info.id if worker_info else 0)
        rng = random.Random(seed)
        print(f"Created a PretokDataset with rng seed {seed}", flush=True)
        shard_filenames = sorted(glob.glob("shards/*.bin"))
        while True:
            rng.shuffle(shard_filenames)
            for shard in shard_filenames:
                m = np.memmap(shard, dtype=np.uint16, mode="r")
                num_batches = len(m) // self.max_seq_len - 1
                ixs = list(range(num_batches))
                rng.shuffle(ixs)
                for ix in ixs:
                    start = ix * self.max_seq_len
                    chunk = torch.from_numpy(
                        m[start : start + self.max_seq_len + 1].astype(np.int64)
                    )
                    yield chunk[:-1], chunk[1:]


def iter_batches(batch_size):
    ds = PretokDataset(SEQ)
    dl = torch.utils.data.DataLoader(ds, batch_size=batch_size, pin_memory=True, num_workers=0)
    for x, y in dl:
        yield x.to("cpu", non_blocking=True), y.to("cpu", non_blocking=True)


torch.manual_seed(1337)
torch.set_num_threads(1)
model = nn.Sequential(nn.Embedding(VOCAB, 32), nn.Linear(32, VOCAB))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
batches = iter_batches(BATCH)
X, Y = next(batches)
for step in range(STEPS):
    loss = nn.functional.cross_entropy(model(X).view(-1, VOCAB), Y.view(-1))
    X, Y = next(batches)  # the next batch is fetched while this one's step runs, as llama2.c
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item()!r} next {X[0, :4].tolist()}", flush=True)
    log.info("step %d", step)
    time.sleep(float(os.environ.get("STEP_SLEEP", "0")))
print("weights", repr(float(sum(p.detach().double().sum() for p in model.parameters()))))
