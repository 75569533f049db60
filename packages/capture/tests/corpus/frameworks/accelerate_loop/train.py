"""accelerate as people use it: prepare the model, optimizer, loader and LR scheduler, then a loop
of the script's own with accumulate and backward; save_state at each epoch's end.
``train.py DELAY``."""

import hashlib
import sys
import time

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed

delay = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
set_seed(0)
accelerator = Accelerator(gradient_accumulation_steps=2, cpu=True)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
ds = torch.utils.data.TensorDataset(torch.randn(200, 16), torch.randn(200, 1))
loader = torch.utils.data.DataLoader(ds, batch_size=16, shuffle=True)
sched = torch.optim.lr_scheduler.StepLR(opt, 5, 0.9)
model, opt, loader, sched = accelerator.prepare(model, opt, loader, sched)
for epoch in range(3):
    for step, (x, y) in enumerate(loader):
        with accelerator.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            opt.step()
            sched.step()
            opt.zero_grad()
        print("step", epoch, step, f"{loss.item():.10f}", accelerator.sync_gradients, sched.get_last_lr()[0], flush=True)
        time.sleep(delay)
    accelerator.save_state(f"state/epoch{epoch}")
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
print("weights", digest.hexdigest())
