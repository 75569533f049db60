# The spec's "Checkpoint/resume pattern" example, unchanged, between the two marker lines; what
# follows it supplies build_model() and drives the class, preempting it at random steps.
# --- spec example begins ---
import bladekit

app = bladekit.app("train-resnet")
ckpt_vol = bladekit.Volume.from_name("resnet-ckpts", create_if_missing=True)


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

    @bladekit.on_preempt
    def checkpoint(self):
        bladekit.save_checkpoint((self.model, self.step), "/ckpt/state.pkl")
        ckpt_vol.commit()

    @app.method()
    def train_step(self, batch):
        loss = self.model.step(batch)
        self.step += 1
        return loss
# --- spec example ends ---


import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402


class Model:
    """A tiny deterministic 'model': its weight depends on every batch it saw, in order."""

    def __init__(self):
        self.weight = 1.0
        self.seen = []

    def step(self, batch):
        self.weight = self.weight * 0.9 + batch
        self.seen.append(batch)
        time.sleep(float(os.environ.get("BK_STEP_S", "0")))
        return abs(self.weight - 10.0)


def build_model():
    return Model()


def preempt_and_wait(trainer):
    """Preempt the trainer's container and wait until it has checkpointed and exited."""
    assert bladekit.run_of(trainer).preempt(seconds=20, wait=True)


if __name__ == "__main__":
    steps, seed = int(sys.argv[1]), int(sys.argv[2])
    rng = random.Random(seed)
    preempt_at = sorted(rng.sample(range(1, steps), 3))
    trainer = Trainer()
    losses = []
    for i in range(steps):
        losses.append(trainer.train_step.remote(float(i)))
        if i in preempt_at:
            preempt_and_wait(trainer)
    preempt_and_wait(trainer)  # a last checkpoint, committed by the callback, to inspect
    run = bladekit.run_of(trainer)
    trainer.close()
    with tempfile.TemporaryDirectory() as folder:
        ckpt_vol.mount(folder)
        model, step = bladekit.load_checkpoint(os.path.join(folder, "state.pkl"))
        ckpt_vol.unmount()
    print(
        json.dumps(
            {
                "preempt_at": preempt_at,
                "losses": losses,
                "step": step,
                "weight": model.weight,
                "seen": model.seen,
                "attempts": run.attempt,
                "interruptions": run.interruptions,
                "events": [e.kind for e in run.events],
                "mount_left": os.path.exists("/ckpt"),
            }
        )
    )
