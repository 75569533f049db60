"""Driver (ours) for torchbearer: trains a small classifier on data the driver makes from a
seeded generator, through torchbearer's Trial (its own training loop, metrics, callbacks and tqdm
progress bars), with a two-worker DataLoader; writes the final weights to weights.pt."""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import torchbearer
from torchbearer import Trial
from torchbearer.callbacks import on_end_epoch

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=8)
parser.add_argument("--samples", type=int, default=4096)
parser.add_argument("--workers", type=int, default=2)
args = parser.parse_args()

torch.manual_seed(0)
X = torch.randn(args.samples, 20)
y = (X @ torch.randn(20, 3) + 0.1 * torch.randn(args.samples, 3)).argmax(1)
split = args.samples * 3 // 4
train = DataLoader(TensorDataset(X[:split], y[:split]), batch_size=64, shuffle=True,
                   num_workers=args.workers)
val = DataLoader(TensorDataset(X[split:], y[split:]), batch_size=256)

model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 3))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


@on_end_epoch
def report(state):
    metrics = state[torchbearer.METRICS]
    print(f"epoch {state[torchbearer.EPOCH]}:",
          ", ".join(f"{k}={v!r}" for k, v in sorted(metrics.items())), flush=True)


trial = Trial(model, optimizer, nn.CrossEntropyLoss(), metrics=["loss", "accuracy"],
              callbacks=[report], verbose=2).to("cpu")
trial.with_generators(train_generator=train, val_generator=val)
history = trial.run(epochs=args.epochs)
print("history", history)
torch.save(model.state_dict(), "weights.pt")
