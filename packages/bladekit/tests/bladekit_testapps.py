"""Apps the runner tests call: a module the containers import by reference, as users' are."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import bladekit

app = bladekit.app("bladekit-tests")

progress: dict[str, Any] = {"step": 0, "total": 0.0, "starts": []}


@app.function()
def add(a: int, b: int) -> int:
    return a + b


@app.function()
def whoami() -> int:
    return os.getpid()


class Unpicklable(Exception):
    def __init__(self, message: str, *, handle: Any) -> None:
        super().__init__(message)
        self.handle = handle

    def __reduce__(self) -> Any:
        raise TypeError("cannot pickle Unpicklable")


@app.function()
def fail(kind: str) -> None:
    if kind == "value":
        raise ValueError("bad input 42")
    raise Unpicklable("holds a lock", handle=object())


@app.function()
def nap(seconds: float) -> str:
    time.sleep(seconds)
    return "rested"


@app.function()
def crash() -> None:
    os._exit(3)


@app.function(max_interruptions=6)
def count_to(n: int, state: str, delay: float) -> dict[str, Any]:
    """A long loop with its state in module globals: the free on_preempt callback saves it."""
    global progress
    progress = bladekit.load_checkpoint(state, default=progress)
    progress["state"] = state
    progress["starts"].append(progress["step"])
    while progress["step"] < n:
        progress["step"] += 1
        progress["total"] += progress["step"] * 0.5
        Path(state + ".progress").write_text(str(progress["step"]))
        time.sleep(delay)
    return progress


@app.on_preempt
def save_progress() -> None:
    if "state" in progress:
        bladekit.save_checkpoint(progress, progress["state"])


@app.cls(max_interruptions=1)
class Counter:
    """Behaviour of the callback is chosen per instance: ok, raise or hang."""

    def __init__(self, mode: str, state: str) -> None:
        self.mode = mode
        self.state = state

    @bladekit.enter()
    def load(self) -> None:
        self.count = bladekit.load_checkpoint(self.state, default=0)
        self.pid = os.getpid()

    @bladekit.on_preempt
    def checkpoint(self) -> None:
        if self.mode == "raise":
            raise RuntimeError("checkpoint disk full")
        if self.mode == "hang":
            time.sleep(60)
        bladekit.save_checkpoint(self.count, self.state)

    @app.method()
    def bump(self) -> tuple[int, int]:
        self.count += 1
        return self.count, self.pid

    @app.method()
    def slow_bump(self, seconds: float) -> tuple[int, int]:
        time.sleep(seconds)
        self.count += 1
        return self.count, self.pid


@app.cls(gpu_class="reserved")
class Reserved:
    @bladekit.enter()
    def load(self) -> None:
        self.pid = os.getpid()

    @app.method()
    def pid_of(self) -> int:
        return self.pid
