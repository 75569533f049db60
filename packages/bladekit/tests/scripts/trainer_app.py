"""The spec's Trainer, made safe to preempt in the middle of a call, run by ``bladekit run``.

The README's idempotent-call pattern: ``train_step`` saves a whole-step checkpoint after each
step, and ``on_preempt`` only commits the volume. A preemption can land anywhere, even halfway
through a step; the callback then makes the last *whole* step durable (never a half-updated live
model), and the retried ``fit`` resumes from it. Steps redone after the checkpoint compute the
same thing again (batches depend only on the step number), so the result equals an uninterrupted
run's. ``BK_VOLUME`` names the volume, so that two runs can start from empty volumes.
"""

import os
import sys
import threading
import time

import bladekit

app = bladekit.app("train-resnet")
ckpt_vol = bladekit.Volume.from_name(
    os.environ.get("BK_VOLUME", "resnet-ckpts"), create_if_missing=True
)


class Model:
    """A tiny deterministic 'model': its weight depends on every batch it saw, in order."""

    def __init__(self):
        self.weight = 1.0
        self.seen = []

    def step(self, batch):
        self.weight = self.weight * 0.9 + batch
        self.seen.append(batch)
        return abs(self.weight - 10.0)


def build_model():
    return Model()


@app.cls(
    gpu="RTX-A4500",
    volumes={"/ckpt": ckpt_vol},
    gpu_class="spot",
    max_interruptions=5,
)
class Trainer:
    @bladekit.enter()
    def load(self):
        self.model, self.step = bladekit.load_checkpoint(
            "/ckpt/state.pkl", default=(build_model(), 0)
        )
        print(f"trainer: starting at step {self.step}", file=sys.stderr, flush=True)

    @bladekit.on_preempt
    def checkpoint(self):
        # The call may have been cut short mid-step: commit the last whole-step checkpoint
        # (train_step wrote it), not the live, possibly half-updated, model.
        ckpt_vol.commit()

    @app.method()
    def train_step(self, batch):
        loss = self.model.step(batch)
        self.step += 1
        bladekit.save_checkpoint((self.model, self.step), "/ckpt/state.pkl")
        return loss

    @app.method()
    def fit(self, steps: int, step_s: float = 0.0) -> dict:
        """Train up to ``steps`` steps; called again after a preemption, it goes on from there."""
        while self.step < steps:
            self.train_step(float(self.step))
            time.sleep(step_s)
        ckpt_vol.commit()
        return {"step": self.step, "weight": self.model.weight, "seen": self.model.seen}


@app.function()
def add(a: int, b: int = 1, *, twice: bool = False) -> int:
    return (a + b) * (2 if twice else 1)


@app.function()
def fail(message: str) -> None:
    raise ValueError(message)


class LockedError(Exception):
    """Holds a lock, so it cannot be pickled back to the caller."""

    def __init__(self, message):
        super().__init__(message)
        self.lock = threading.Lock()


@app.function()
def fail_locked(message: str) -> None:
    raise LockedError(message)


@app.function(max_interruptions=0)
def sleepy(seconds: float) -> str:
    time.sleep(seconds)
    return "woke"


@app.function()
def nap(seconds: float, started: str) -> str:
    """Sleeps after writing its container's pid to ``started`` (tests stop it mid-call)."""
    with open(started + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(started + ".tmp", started)
    time.sleep(seconds)
    return "rested"


@app.function(gpu_class="reserved")
def steady_nap(seconds: float, started: str) -> str:
    """``nap`` on reserved capacity, which is never preempted."""
    return nap.local(seconds, started)


@app.cls()
class Job:
    """A class with its own ``run`` method: ``bladekit.run_of`` never hides it."""

    @app.method()
    def run(self, what: str) -> str:
        return f"ran {what}"

    @app.method()
    def close(self) -> str:
        return "the user's close"
