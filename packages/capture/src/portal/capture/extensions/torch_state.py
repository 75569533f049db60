"""torch's process-level state: its random generators and its numeric settings.

- **Random generators**: the default CPU generator's state, and every CUDA device's when the
  program initialized CUDA (restored onto the devices that exist here; a checkpoint of a GPU
  job resumed on a CPU machine keeps its CPU stream). ``torch.Generator`` objects the program
  made travel in the pickle (see :mod:`~portal.capture.extensions.tensors`).
- **Numeric settings**: default dtype, float32 matmul precision, deterministic algorithms (and
  ``warn_only``), cuDNN ``enabled``/``benchmark``/``deterministic``, the TF32 flags, grad mode,
  the number of intra-op threads, and autocast's state (a pause inside ``with torch.autocast``:
  each device type's enabled flag and dtype, its cast cache flag and its nesting depth, so the
  lines left in the block still run in reduced precision and its ``__exit__`` still clears the
  cast cache). Each is carried only when the program changed it from the
  value torch had right after its import (the baseline, recorded by an import hook), so a
  resumed process keeps the new machine's own defaults for the rest (its thread count, say).
  Grad mode is the paused thread's, as it is in torch.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from portal.capture.extensions._imports import when_imported
from portal.core.specs import CaptureExtensionSpec

__all__ = ["TorchSettings", "capture_rng", "restore_rng", "specs"]


def _torch() -> Any:
    return sys.modules["torch"]


# -- random generators ------------------------------------------------------------------------


def capture_rng() -> dict[str, Any]:
    torch = _torch()
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    cuda = sys.modules.get("torch.cuda")
    if cuda is not None and cuda.is_initialized():
        state["cuda"] = cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    torch = _torch()
    torch.set_rng_state(state["cpu"])
    saved = state.get("cuda")
    if saved and torch.cuda.is_available():
        count = torch.cuda.device_count()
        for index in range(min(count, len(saved))):
            torch.cuda.set_rng_state(saved[index], index)


# -- numeric settings -------------------------------------------------------------------------


#: The device types whose autocast state is carried (each has its own flag and dtype in torch).
_AUTOCAST_DEVICES = ("cpu", "cuda")


def _setting_table() -> dict[str, tuple[Callable[[], Any], Callable[[Any], None]]]:
    """name -> (read, write) for each setting; read only what this torch build has."""
    torch = _torch()
    backends = torch.backends

    def deterministic() -> tuple[bool, bool]:
        return (
            bool(torch.are_deterministic_algorithms_enabled()),
            bool(torch.is_deterministic_algorithms_warn_only_enabled()),
        )

    def set_deterministic(value: tuple[bool, bool]) -> None:
        torch.use_deterministic_algorithms(value[0], warn_only=value[1])

    def autocast() -> tuple[int, bool, tuple[tuple[str, bool, Any], ...]]:
        depth = torch.autocast_increment_nesting() - 1  # torch reads its depth no other way
        torch.autocast_decrement_nesting()
        devices = tuple(
            (d, bool(torch.is_autocast_enabled(d)), torch.get_autocast_dtype(d))
            for d in _AUTOCAST_DEVICES
        )
        return depth, bool(torch.is_autocast_cache_enabled()), devices

    def set_autocast(value: tuple[int, bool, tuple[tuple[str, bool, Any], ...]]) -> None:
        depth, cache, devices = value
        for device, enabled, dtype in devices:
            torch.set_autocast_enabled(device, enabled)
            torch.set_autocast_dtype(device, dtype)
        torch.set_autocast_cache_enabled(cache)
        now = torch.autocast_increment_nesting() - 1
        torch.autocast_decrement_nesting()
        for _ in range(depth - now):
            torch.autocast_increment_nesting()
        for _ in range(now - depth):
            torch.autocast_decrement_nesting()

    def attr(obj: Any, name: str) -> tuple[Callable[[], Any], Callable[[Any], None]]:
        return (lambda: getattr(obj, name), lambda value: setattr(obj, name, value))

    return {
        "default_dtype": (torch.get_default_dtype, torch.set_default_dtype),
        "float32_matmul_precision": (
            torch.get_float32_matmul_precision,
            torch.set_float32_matmul_precision,
        ),
        "deterministic_algorithms": (deterministic, set_deterministic),
        "cudnn.enabled": attr(backends.cudnn, "enabled"),
        "cudnn.benchmark": attr(backends.cudnn, "benchmark"),
        "cudnn.deterministic": attr(backends.cudnn, "deterministic"),
        "cudnn.allow_tf32": attr(backends.cudnn, "allow_tf32"),
        "cuda.matmul.allow_tf32": attr(backends.cuda.matmul, "allow_tf32"),
        "grad_enabled": (torch.is_grad_enabled, torch.set_grad_enabled),
        "num_threads": (torch.get_num_threads, torch.set_num_threads),
        "autocast": (autocast, set_autocast),
    }


class TorchSettings:
    """The settings the program changed since torch's import (see the module docstring)."""

    def __init__(self) -> None:
        self.baseline: dict[str, Any] | None = None
        when_imported("torch", self._record_baseline)

    def _record_baseline(self, _module: object) -> None:
        self.baseline = self._read()

    @staticmethod
    def _read() -> dict[str, Any]:
        values = {}
        for name, (read, _write) in _setting_table().items():
            try:
                values[name] = read()
            except (AttributeError, RuntimeError, TypeError):  # not in this build
                continue
        return values

    def capture(self) -> dict[str, Any]:
        now = self._read()
        baseline = self.baseline or {}
        # No baseline (torch was imported before Portal armed): carry everything.
        return {k: v for k, v in now.items() if k not in baseline or baseline[k] != v}

    def restore(self, changed: dict[str, Any]) -> None:
        # Only what differs is written: some flags follow from others (float32 matmul precision
        # sets the matmul TF32 flag), and torch refuses to read the precision once its legacy
        # and new setters were both used.
        table = _setting_table()
        for name, value in changed.items():
            entry = table.get(name)
            if entry is None:
                continue
            read, write = entry
            try:
                if read() == value:
                    continue
            except (AttributeError, RuntimeError, TypeError):
                pass
            write(value)


def specs() -> list[CaptureExtensionSpec]:
    settings = TorchSettings()
    return [
        CaptureExtensionSpec(
            name="torch_random",
            capture=capture_rng,
            restore=restore_rng,
            modules=("torch",),
            description="torch's default CPU generator and CUDA generators' states",
        ),
        CaptureExtensionSpec(
            name="torch_settings",
            capture=settings.capture,
            restore=settings.restore,
            modules=("torch",),
            description="torch numeric settings the program changed (dtype, precision, "
            "determinism, cuDNN/TF32, grad mode, threads, autocast)",
        ),
    ]
