"""GPU tensors updated in place of their own device: resumed on a machine without a GPU, the
script runs on with its tensors on the CPU (float32 products and remainders are exact on both,
so the values printed are the GPU run's)."""

import time

import torch

w = torch.arange(1000.0, device="cuda")
for i in range(30):
    w = w * 1.5 % 7
    print(i, w[:4].tolist(), w.device.type, flush=True)
    time.sleep(0.05)
