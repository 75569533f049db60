"""A small GPU training loop for the gpu-marked tests, paused and resumed mid-epoch: batches
from the script's own generator on a user CUDA generator, dropout (the default CUDA generator),
Adam with its moments on the GPU, fp16 autocast with a GradScaler (argv "amp") and an evaluation
under autocast and no_grad, a bf16 head
trained with SGD and momentum, TF32 and precision settings changed. Its output, and the final
weights' digest, must come out byte for byte as an uninterrupted run's on the same GPU."""

import hashlib
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch
from torch import nn

MODE = sys.argv[1] if len(sys.argv) > 1 else "amp"
STEPS = 40
device = "cuda"

torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
torch.backends.cudnn.allow_tf32 = False
torch.set_float32_matmul_precision("high")

data_gen = torch.Generator(device=device).manual_seed(7)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 1)).to(device)
head = nn.Linear(64, 64).to(device=device, dtype=torch.bfloat16)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
head_opt = torch.optim.SGD(head.parameters(), lr=1e-2, momentum=0.9)
scaler = torch.amp.GradScaler("cuda", enabled=MODE == "amp")


def batches(n):
    for _ in range(n):
        x = torch.randn(32, 64, device=device, generator=data_gen)
        yield x, x.sum(dim=1, keepdim=True)


for step, (x, y) in enumerate(batches(STEPS)):
    with torch.autocast("cuda", dtype=torch.float16, enabled=MODE == "amp"):
        loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    h = head(x.to(torch.bfloat16)).float().pow(2).mean()
    head_opt.zero_grad()
    h.backward()
    head_opt.step()
    if step % 10 == 5:  # an evaluation in reduced precision, paused inside by one test
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=MODE == "amp"):
            print(f"eval {step}", flush=True)
            time.sleep(0.05)
            out = model.eval()(x)
            model.train()
            print(f"eval {step} {out.dtype} {out.float().sum().item():.6f}", flush=True)
    noise = torch.rand(1, device=device).item()
    print(
        f"step {step} loss {loss.item():.6f} head {h.item():.6f} noise {noise:.6f} "
        f"scale {scaler.get_scale()} precision {torch.get_float32_matmul_precision()}",
        flush=True,
    )
    time.sleep(0.03)

digest = hashlib.sha256()
tensors = [*model.parameters(), *head.parameters()]
tensors += [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
tensors += [v for s in head_opt.state.values() for v in s.values() if torch.is_tensor(v)]
for t in tensors:
    digest.update(t.detach().contiguous().view(-1).view(torch.uint8).cpu().numpy().tobytes())
print(
    "devices",
    sorted({t.device.type for t in tensors}),
    "dtypes",
    sorted({str(t.dtype) for t in tensors}),
)
print("weights", digest.hexdigest())
