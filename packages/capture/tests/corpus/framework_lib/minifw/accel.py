"""accelerate's shape: states shared through class-level dicts ("Borg"), a loader whose
``__iter__`` is a generator, and ``accumulate`` as a ``@contextmanager``."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator


class PartialState:
    _shared_state: dict = {}

    def __init__(self) -> None:
        self.__dict__ = self._shared_state
        if not self._shared_state:
            self.process_index = 0
            self.seed_used = random.random()


class GradientState:
    _shared_state: dict = {}

    def __init__(self, accumulation_steps: int | None = None) -> None:
        self.__dict__ = self._shared_state
        if not self._shared_state:
            self.accumulation_steps = accumulation_steps or 1
            self.sync_gradients = True
            self.end_of_dataloader = False
            self.step = 0


class Loader:
    """Batches of a list, shuffled per epoch with its own RNG (as a DataLoader's sampler)."""

    def __init__(self, data: list[list[float]], batch_size: int, seed: int) -> None:
        self.data = data
        self.batch_size = batch_size
        self.rng = random.Random(seed)
        self.gradient_state = GradientState()

    def __iter__(self) -> Iterator[list[list[float]]]:
        order = list(range(len(self.data)))
        self.rng.shuffle(order)
        self.gradient_state.end_of_dataloader = False
        for start in range(0, len(order), self.batch_size):
            batch = [self.data[i] for i in order[start : start + self.batch_size]]
            if start + self.batch_size >= len(order):
                self.gradient_state.end_of_dataloader = True
            yield batch


class Accelerator:
    def __init__(self, gradient_accumulation_steps: int = 1) -> None:
        self.state = PartialState()
        self.gradient_state = GradientState(gradient_accumulation_steps)

    @property
    def sync_gradients(self) -> bool:
        return self.gradient_state.sync_gradients

    def prepare(self, data: list[list[float]], batch_size: int, seed: int) -> Loader:
        return Loader(data, batch_size, seed)

    @contextlib.contextmanager
    def accumulate(self, model: object) -> Iterator[None]:
        gs = self.gradient_state
        gs.step += 1
        gs.sync_gradients = gs.end_of_dataloader or gs.step % gs.accumulation_steps == 0
        yield
