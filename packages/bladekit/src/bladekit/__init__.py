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
:mod:`bladekit.testing` delivers preemptions to them, ``bladekit run FILE::FUNCTION`` runs one
from a shell and :func:`bladekit.listing.runs` lists them.

The names below are imported on first use (PEP 562), so that ``import bladekit`` stays fast for
the ``bladekit`` command, for containers, and for :mod:`bladekit.listing`, which reads only files.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bladekit.app import (
        App,
        Cls,
        ClsInstance,
        Function,
        FunctionCall,
        LocalEntrypoint,
        Method,
        app,
        run_of,
    )
    from bladekit.checkpoints import load_checkpoint, save_checkpoint
    from bladekit.errors import (
        AppStoppedError,
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

_HOMES = {
    "bladekit.app": (
        "App",
        "Cls",
        "ClsInstance",
        "Function",
        "FunctionCall",
        "LocalEntrypoint",
        "Method",
        "app",
        "run_of",
    ),
    "bladekit.checkpoints": ("load_checkpoint", "save_checkpoint"),
    "bladekit.errors": (
        "AppStoppedError",
        "ContainerExitedError",
        "InvalidArgumentError",
        "PreemptedError",
        "RemoteError",
        "RunError",
        "SerializationError",
    ),
    "bladekit.hooks": ("enter", "method", "on_preempt"),
    "bladekit.runner": ("Run", "RunEvent"),
    "bladekit.volumes": ("Volume",),
    "bladekit.wire": ("FunctionRequest",),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "App",
    "AppStoppedError",
    "Cls",
    "ClsInstance",
    "ContainerExitedError",
    "Function",
    "FunctionCall",
    "FunctionRequest",
    "InvalidArgumentError",
    "LocalEntrypoint",
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
    "run_of",
    "save_checkpoint",
]


def __getattr__(name: str) -> Any:
    home = _HOME_OF.get(name)
    if home is None:
        raise AttributeError(f"module 'bladekit' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # once found, a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
