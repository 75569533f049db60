"""A wandb run in offline mode held in a global (its service process, the socket whose address
wandb puts in the environment), logged at every step, with numpy."""

import os
import sys
import time

import numpy as np
import wandb

run = wandb.init(project="portal-test", mode="offline", dir=".", config={"lr": 0.1})
rng = np.random.default_rng(0)
w = 0.0
for step in range(int(sys.argv[1]) if len(sys.argv) > 1 else 30):
    w += float(rng.standard_normal())
    run.log({"loss": w})
    print("step", step, f"{w:.6f}", flush=True)
    time.sleep(float(os.environ.get("STEP_SLEEP", "0.05")))
run.finish()
print("done", run.config["lr"])
