"""Hugging Face Trainer's shape: ``train()`` calls the inner loop through ``functools.partial``
(as ``find_executable_batch_size`` does), the loop is the library's, callbacks are the user's."""

from __future__ import annotations

import functools
import math
import random
from typing import Any

from minifw.accel import Accelerator


class Callback:
    def on_step_end(self, trainer: Trainer, step: int, loss: float) -> None:
        pass

    def on_epoch_end(self, trainer: Trainer, epoch: int) -> None:
        pass


class Model:
    def __init__(self, size: int) -> None:
        self.w = [random.uniform(-1, 1) for _ in range(size)]
        self.grad = [0.0] * size

    def loss(self, batch: list[list[float]]) -> float:
        total = 0.0
        for x in batch:
            pred = math.tanh(sum(wi * xi for wi, xi in zip(self.w, x, strict=True)))
            err = pred - x[0]
            total += err * err
            for i, xi in enumerate(x):
                self.grad[i] += 2 * err * (1 - pred * pred) * xi
        return total / len(batch)

    def apply(self, lr: float) -> None:
        self.w = [w - lr * g for w, g in zip(self.w, self.grad, strict=True)]
        self.grad = [0.0] * len(self.w)


class Trainer:
    def __init__(
        self,
        data: list[list[float]],
        *,
        epochs: int,
        batch_size: int,
        accumulation: int,
        callbacks: list[Any],
        seed: int,
    ) -> None:
        self.accelerator = Accelerator(gradient_accumulation_steps=accumulation)
        self.model = Model(len(data[0]))
        self.loader = self.accelerator.prepare(data, batch_size, seed)
        self.epochs = epochs
        self.batch_size = batch_size
        self.callbacks = callbacks
        self.global_step = 0
        self.optimizer_steps = 0
        self.lr = 0.1

    def train(self) -> dict[str, Any]:
        inner = functools.partial(self._inner_training_loop, batch_size=self.batch_size)
        return inner(epochs=self.epochs)

    def _inner_training_loop(self, batch_size: int, epochs: int) -> dict[str, Any]:
        losses = []
        for epoch in range(epochs):
            for step, batch in enumerate(self.loader):
                with self.accelerator.accumulate(self.model):
                    loss = self.model.loss(batch)
                    if self.accelerator.sync_gradients:
                        self.model.apply(self.lr)
                        self.optimizer_steps += 1
                self.global_step += 1
                if type(loss).__name__ in {"float", "int", "float32", "float64", "Tensor", "ndarray"}:
                    losses.append(loss)  # a set of names: a frozenset in this code's constants
                for callback in self.callbacks:
                    callback.on_step_end(self, step, loss)
            self.lr *= 0.9
            for callback in self.callbacks:
                callback.on_epoch_end(self, epoch)
        return {"steps": self.global_step, "optimizer_steps": self.optimizer_steps,
                "mean_loss": sum(losses) / len(losses), "weights": self.model.w}
