"""Lightning's Trainer.fit as people use it: a LightningModule, an optimizer with an LR scheduler,
a DataLoader, a CSVLogger, a ModelCheckpoint each epoch and a callback of the script's own.
``train.py DELAY``."""

import hashlib
import sys
import time

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

delay = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
L.seed_everything(0, verbose=False)


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)]


class Printer(Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        print("batch", trainer.current_epoch, batch_idx, trainer.global_step, f"{outputs['loss'].item():.10f}", flush=True)
        time.sleep(delay)


g = torch.Generator().manual_seed(1)
ds = torch.utils.data.TensorDataset(torch.randn(256, 16, generator=g), torch.randn(256, 1, generator=g))
loader = torch.utils.data.DataLoader(ds, batch_size=16, shuffle=True)
trainer = L.Trainer(
    max_epochs=3, accelerator="cpu", devices=1, logger=CSVLogger("logs", name="run", version=0),
    callbacks=[Printer(), ModelCheckpoint(dirpath="ckpts", every_n_epochs=1, save_top_k=-1)],
    enable_progress_bar=False, enable_model_summary=False, deterministic=True, log_every_n_steps=1,
)
model = Net()
trainer.fit(model, loader)
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
print("weights", digest.hexdigest())
