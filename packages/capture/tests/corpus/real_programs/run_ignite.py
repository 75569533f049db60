"""Driver (ours) for PyTorch-Ignite: trains a small regression network on data the driver makes
from a seeded generator, with ignite's supervised trainer and evaluator Engines, its metrics, a
learning-rate scheduler and its tqdm ProgressBar, event handlers printing every epoch; a
two-worker DataLoader; writes the final weights to weights.pt."""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ignite.contrib.handlers import ProgressBar
from ignite.engine import Events, create_supervised_evaluator, create_supervised_trainer
from ignite.handlers import PiecewiseLinear
from ignite.metrics import Loss, MeanAbsoluteError

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=6)
parser.add_argument("--samples", type=int, default=4096)
parser.add_argument("--workers", type=int, default=2)
args = parser.parse_args()

torch.manual_seed(0)
X = torch.randn(args.samples, 16)
y = torch.sin(X[:, :4].sum(1, keepdim=True)) + 0.05 * torch.randn(args.samples, 1)
split = args.samples * 3 // 4
train = DataLoader(TensorDataset(X[:split], y[:split]), batch_size=64, shuffle=True,
                   num_workers=args.workers)
val = DataLoader(TensorDataset(X[split:], y[split:]), batch_size=256)

model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
trainer = create_supervised_trainer(model, optimizer, nn.MSELoss())
evaluator = create_supervised_evaluator(
    model, metrics={"mse": Loss(nn.MSELoss()), "mae": MeanAbsoluteError()}
)
steps = args.epochs * len(train)
trainer.add_event_handler(
    Events.ITERATION_STARTED,
    PiecewiseLinear(optimizer, "lr", [(0, 1e-2), (steps, 1e-4)]),
)
ProgressBar(persist=True).attach(trainer, output_transform=lambda loss: {"loss": loss})


@trainer.on(Events.EPOCH_COMPLETED)
def validate(engine):
    evaluator.run(val)
    metrics = evaluator.state.metrics
    print(f"epoch {engine.state.epoch} iteration {engine.state.iteration}: "
          f"last loss {engine.state.output!r} val mse {metrics['mse']!r} "
          f"mae {metrics['mae']!r} lr {optimizer.param_groups[0]['lr']!r}", flush=True)


trainer.run(train, max_epochs=args.epochs)
torch.save(model.state_dict(), "weights.pt")
print("done after", trainer.state.iteration, "iterations")
