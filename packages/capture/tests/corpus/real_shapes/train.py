"""A training script in the shapes real ones have (written for Portal's tests, after the common
layout of nanoGPT-style and tutorial training scripts; no code taken from them):

* argparse, and module-level settings that a config file overrides by being executed into the
  globals (``exec(open(config).read())``);
* a log file opened once at module level and written every epoch;
* a map-style Dataset of its own and a DataLoader with two worker processes;
* ``train()`` reading the module globals ``lr`` and ``epoch``, a tqdm bar when tqdm is there;
* the epoch loop at module level, saving a checkpoint each epoch inside
  ``with open(path, "wb") as f: torch.save(..., f)``;
* the final weights written to weights.pt, which the test compares bit for bit.
"""

import argparse
import math

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

try:
    from tqdm import tqdm
except ImportError:  # the bar is optional, as in many scripts
    tqdm = None

# Settings (a config file may override any of them).
lr = 0.3
epochs = 4
batch_size = 64
momentum = 0.9
hidden = 32
samples = 1536
seed = 1234
workers = 2
log_path = "train.log"

parser = argparse.ArgumentParser()
parser.add_argument("--config", help="a Python file of settings, executed into the globals")
parser.add_argument("--epochs", type=int)
args = parser.parse_args()
if args.config:
    exec(open(args.config).read())
if args.epochs is not None:
    epochs = args.epochs

torch.manual_seed(seed)
log = open(log_path, "a")
print(f"settings: lr={lr} epochs={epochs} batch_size={batch_size} hidden={hidden}", file=log)


class Spirals(Dataset):
    """Two interleaved spirals, made from a seeded generator: (point, class)."""

    def __init__(self, n, noise=0.05):
        g = torch.Generator().manual_seed(seed)
        t = torch.rand(n, generator=g) * 3 * math.pi
        label = torch.arange(n) % 2
        sign = 1 - 2 * label.float()
        x = torch.stack([t * torch.cos(t) * sign, t * torch.sin(t) * sign], 1) / 10
        self.x = x + noise * torch.randn(n, 2, generator=g)
        self.y = label

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


data = Spirals(samples)
loader = DataLoader(data, batch_size=batch_size, shuffle=True, num_workers=workers)
model = nn.Sequential(nn.Linear(2, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                      nn.Linear(hidden, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
loss_fn = nn.CrossEntropyLoss()
step = 0


def train():
    global step
    for group in optimizer.param_groups:  # cosine schedule from the globals lr and epoch
        group["lr"] = lr * 0.5 * (1 + math.cos(math.pi * epoch / epochs))
    model.train()
    total, count = 0.0, 0
    batches = tqdm(loader, desc=f"epoch {epoch}") if tqdm is not None else loader
    for x, y in batches:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        step += 1
        total += loss.item() * len(y)
        count += len(y)
    return total / count


def evaluate():
    model.eval()
    with torch.no_grad():
        logits = model(data.x)
        return (logits.argmax(1) == data.y).float().mean().item()


for epoch in range(epochs):
    mean_loss = train()
    accuracy = evaluate()
    print(f"epoch {epoch} step {step} loss {mean_loss!r} accuracy {accuracy!r}", flush=True)
    print(f"epoch {epoch}: loss {mean_loss!r} accuracy {accuracy!r}", file=log, flush=True)
    with open(f"checkpoint-{epoch}.pt", "wb") as f:
        torch.save({"epoch": epoch, "model": model.state_dict(),
                    "optimizer": optimizer.state_dict()}, f)

torch.save(model.state_dict(), "weights.pt")
print("done", file=log)
log.close()
print("done after", step, "steps")
