"""MLflow runs on a local tracking store, started with the fluent API and logged at every step
(metrics, parameters), with numpy. ``nested``: a sweep's run with a trial's run nested in it,
the trial's metrics logged asynchronously, the best value logged to the sweep at the end."""

import os
import sys
import time

import mlflow
import numpy as np

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
nested = len(sys.argv) > 2 and sys.argv[2] == "nested"
mlflow.set_tracking_uri("file:" + os.path.abspath("mlruns"))
mlflow.set_experiment("portal-test")
run = mlflow.start_run(run_name="sweep" if nested else "train")
mlflow.log_param("lr", 0.1)
if nested:
    mlflow.start_run(run_name="trial-0", nested=True)
rng = np.random.default_rng(0)
w = best = 0.0
for step in range(steps):
    w += float(rng.standard_normal())
    best = min(best, w)
    mlflow.log_metric("loss", w, step=step, synchronous=not nested)
    print("step", step, f"{w:.6f}", flush=True)
    time.sleep(float(os.environ.get("STEP_SLEEP", "0.05")))
if nested:
    mlflow.end_run()
    mlflow.log_metric("best", best)
mlflow.end_run()
print("done", mlflow.get_run(run.info.run_id).data.params["lr"])
