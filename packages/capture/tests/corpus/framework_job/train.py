"""A script whose training loop is a framework's (minifw, installed as a library): it builds
the data, configures the Trainer, prints from a callback and prints the result."""

import random
import sys
import time

from minifw import Callback, GradientState, PartialState, Trainer

random.seed(7)
STEPS_DELAY = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0


class Printer(Callback):
    def on_step_end(self, trainer, step, loss):
        gs = GradientState()
        print(
            f"step {trainer.global_step} (epoch step {step}) loss {loss:.12f} "
            f"opt {trainer.optimizer_steps} sync {gs.sync_gradients} acc {gs.step}",
            flush=True,
        )
        if STEPS_DELAY:
            time.sleep(STEPS_DELAY)

    def on_epoch_end(self, trainer, epoch):
        print(f"epoch {epoch} done, lr {trainer.lr:.6f}", flush=True)


data = [[random.uniform(-1, 1) for _ in range(24)] for _ in range(100)]
trainer = Trainer(data, epochs=3, batch_size=8, accumulation=3, callbacks=[Printer()], seed=11)
result = trainer.train()
shared = PartialState()
print("shared state kept:", shared is not trainer.accelerator.state,
      shared.__dict__ is trainer.accelerator.state.__dict__,
      GradientState().__dict__ is trainer.loader.gradient_state.__dict__)
print("steps", result["steps"], "optimizer steps", result["optimizer_steps"])
print("mean loss", repr(result["mean_loss"]))
print("weights", [repr(w) for w in result["weights"]])
