"""bladekit (the distribution portal-bladekit): run Python functions and classes on
interruptible GPUs that checkpoint and resume.

::

    import bladekit

    app = bladekit.app("train-resnet")
    vol = bladekit.Volume.from_name("resnet-ckpts", create_if_missing=True)

    @app.cls(gpu="RTX-A4500", volumes={"/ckpt": vol}, gpu_class="spot", max_interruptions=5)
    class Trainer:
        @bladekit.enter()
        def load(self): ...            # runs on every attempt: load the checkpoint here

        @bladekit.on_preempt
        def checkpoint(self): ...      # runs inside the grace window: save + vol.commit()

        @app.method()
        def train_step(self, batch): ...

On this machine every function runs in a local subprocess "container" (see ``bladekit.runner``);
:mod:`bladekit.testing` delivers preemptions to them.
"""

from __future__ import annotations

from bladekit.app import App, Cls, ClsInstance, Function, FunctionCall, Method, app
from bladekit.checkpoints import load_checkpoint, save_checkpoint
from bladekit.errors import (
    ContainerExitedError,
    InvalidArgumentError,
    PreemptedError,
    RemoteError,
    RunError,
    SerializationError,
)
from bladekit.hooks import enter, method, on_preempt
from bladekit.runner import Run, RunEvent
from bladekit.volumes import Volume
from bladekit.wire import FunctionRequest

__version__ = "0.1.0"

__all__ = [
    "App",
    "Cls",
    "ClsInstance",
    "ContainerExitedError",
    "Function",
    "FunctionCall",
    "FunctionRequest",
    "InvalidArgumentError",
    "Method",
    "PreemptedError",
    "RemoteError",
    "Run",
    "RunError",
    "RunEvent",
    "SerializationError",
    "Volume",
    "app",
    "enter",
    "load_checkpoint",
    "method",
    "on_preempt",
    "save_checkpoint",
]
