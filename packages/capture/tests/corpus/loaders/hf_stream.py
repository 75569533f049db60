"""A Hugging Face streaming dataset (``load_dataset(..., streaming=True)``, the shape of most LLM
pre-training loaders) over local JSON-lines shards, in torch format, read by a DataLoader: in
process (``plain``) or by two workers of torchdata's StatefulDataLoader (``stateful``). A model
trained on it, two epochs (``set_epoch`` each)."""

import json
import os
import sys
import time
from pathlib import Path

import torch
from datasets import load_dataset

if not Path("shards").exists():
    Path("shards").mkdir()
    for shard in range(4):
        with open(f"shards/part-{shard}.jsonl", "w") as fh:
            for i in range(25):
                n = shard * 100 + i
                fh.write(json.dumps({"id": n, "x": [n * 0.01 * k for k in range(8)]}) + "\n")

shape = sys.argv[1] if len(sys.argv) > 1 else "plain"
files = sorted(str(p) for p in Path("shards").glob("*.jsonl"))
ds = load_dataset("json", data_files=files, split="train", streaming=True).with_format("torch")
if shape == "plain":
    loader = torch.utils.data.DataLoader(ds, batch_size=4)
else:
    from torchdata.stateful_dataloader import StatefulDataLoader

    loader = StatefulDataLoader(ds, batch_size=4, num_workers=2)
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.001)
step = 0
for epoch in range(2):
    ds.set_epoch(epoch)
    for batch in loader:
        loss = model(batch["x"].float()).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("step", step, epoch, batch["id"].tolist(), f"{loss.item():.6f}", flush=True)
        step += 1
        time.sleep(float(os.environ.get("STEP_SLEEP", "0.05")))
print("done", [f"{p:.6f}" for p in model.weight.flatten().tolist()])
