"""The settings of ``@app.function(...)`` / ``@app.cls(...)``, validated at decoration time.

Validating here, client-side, means a typo such as ``gpu_class="spto"`` fails on the decorator's
line, naming the value and what is allowed, instead of after a container was scheduled.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

import attrs

from bladekit.volumes import Volume
from bladekit.wire import FunctionRequest
from portal.core.errors import InvalidArgumentError

__all__ = ["GPU_CLASSES", "FunctionOptions"]

#: The capacity classes: spot is interruptible (the default), reserved never preempted.
GPU_CLASSES = ("spot", "reserved")


def _check_gpu(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgumentError(
            f"gpu={value!r} is not valid: give a GPU type as a string (e.g. gpu='RTX-A4500' or "
            "gpu='A100:2'), or leave it out for a CPU-only container",
            details={"argument": "gpu", "value": repr(value)},
        )
    return value.strip()


def _check_gpu_class(value: Any) -> str:
    if not isinstance(value, str) or value not in GPU_CLASSES:
        allowed = " or ".join(repr(c) for c in GPU_CLASSES)
        raise InvalidArgumentError(
            f"gpu_class={value!r} is not valid: use {allowed} ('spot' is interruptible and the "
            "default; 'reserved' is never preempted)",
            details={"argument": "gpu_class", "value": repr(value), "allowed": list(GPU_CLASSES)},
        )
    return value


def _check_best_effort(value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgumentError(
            f"best_effort={value!r} is not valid: use True or False",
            details={"argument": "best_effort", "value": repr(value)},
        )
    return value


def _check_max_interruptions(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(
            f"max_interruptions={value!r} is not valid: give a whole number of preemptions the "
            "run may survive (0 or more), or None for the platform default",
            details={"argument": "max_interruptions", "value": repr(value)},
        )
    return value


def _check_volumes(value: Any) -> dict[str, Volume]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(
            f"volumes={value!r} is not valid: give a dict of mount path -> bladekit.Volume, "
            "e.g. volumes={'/ckpt': bladekit.Volume.from_name('ckpts', create_if_missing=True)}",
            details={"argument": "volumes"},
        )
    checked: dict[str, Volume] = {}
    for path, volume in value.items():
        if not isinstance(path, str) or not path.startswith("/"):
            raise InvalidArgumentError(
                f"volume mount path {path!r} is not valid: give an absolute path such as '/ckpt'",
                details={"argument": "volumes", "path": repr(path)},
            )
        norm = posixpath.normpath(path)
        if norm == "/":
            raise InvalidArgumentError(
                "a volume cannot be mounted at '/': give a folder such as '/ckpt'",
                details={"argument": "volumes", "path": path},
            )
        if not isinstance(volume, Volume):
            raise InvalidArgumentError(
                f"volumes[{path!r}] is {type(volume).__name__}, not a bladekit.Volume: get one "
                "with bladekit.Volume.from_name(name, create_if_missing=True)",
                details={"argument": "volumes", "path": path},
            )
        for other_path, other in checked.items():
            if other == volume:
                raise InvalidArgumentError(
                    f"volume {volume.name!r} is mounted twice ({other_path} and {norm}): mount "
                    "it once and use folders below that path",
                    details={"argument": "volumes", "volume": volume.name},
                )
            if norm.startswith(other_path + "/") or other_path.startswith(norm + "/"):
                raise InvalidArgumentError(
                    f"volume mount paths {other_path} and {norm} overlap: mount volumes at "
                    "separate folders",
                    details={"argument": "volumes", "paths": [other_path, norm]},
                )
        checked[norm] = volume
    return checked


@attrs.frozen(kw_only=True)
class FunctionOptions:
    """The validated settings of one function or class; ``request()`` is their wire form."""

    gpu: str | None = attrs.field(default=None, converter=_check_gpu)
    gpu_class: str = attrs.field(default="spot", converter=_check_gpu_class)
    best_effort: bool = attrs.field(default=False, converter=_check_best_effort)
    max_interruptions: int | None = attrs.field(default=None, converter=_check_max_interruptions)
    volumes: Mapping[str, Volume] = attrs.field(factory=dict, converter=_check_volumes)

    @property
    def preemptible(self) -> bool:
        return self.gpu_class == "spot"

    def request(self, *, app: str, function: str) -> FunctionRequest:
        """The control-plane request for a run of ``function`` of ``app`` with these settings."""
        return FunctionRequest(
            app=app,
            function=function,
            gpu=self.gpu,
            gpu_class=self.gpu_class,
            best_effort=self.best_effort,
            max_interruptions=self.max_interruptions,
            volumes={path: volume.name for path, volume in self.volumes.items()},
        )
