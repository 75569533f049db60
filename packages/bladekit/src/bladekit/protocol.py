"""Messages between the runner and a container, and how they are framed on the pipes.

Runner -> container on the container's stdin; container -> runner on a private copy of its stdout
(the container points fd 1 at stderr so that ``print`` in user code cannot corrupt the stream).
A frame is a 4-byte big-endian length and a pickle of one message. Messages carry arbitrary user
objects (arguments, results, exceptions), so they are pickled (cloudpickle on the way in), not
msgspec-encoded; both ends are the same bladekit on the same machine.
"""

from __future__ import annotations

import os
import pickle
import struct
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import cloudpickle

__all__ = [
    "Call",
    "CallFailed",
    "CallResult",
    "Close",
    "ContainerSpec",
    "Message",
    "Preempted",
    "Ready",
    "StartFailed",
    "TargetRef",
    "dump_frame",
    "read_frame",
    "reference",
    "split_frames",
]

_HEADER = struct.Struct(">I")


@dataclass(frozen=True)
class TargetRef:
    """A decorated function or class found again by import in the container.

    Used when the user's module is importable: the container then runs the module's own objects,
    so a function and a free ``on_preempt`` callback share the module's real globals (by-value
    pickling would give the function a copy). Scripts (``__main__``) travel by value instead,
    where cloudpickle gives functions pickled together one shared globals dict.
    """

    module: str
    qualname: str

    def resolve(self) -> Any:
        import importlib

        found: Any = importlib.import_module(self.module)
        for part in self.qualname.split("."):
            found = getattr(found, part)
        return getattr(found, "raw", found)  # the wrapper in the module -> the user's object


def reference(raw: Any, wrapper: Any) -> Any:
    """``raw`` as a :class:`TargetRef` when its module attribute is ``wrapper``; else ``raw``."""
    import sys

    module = getattr(raw, "__module__", None)
    qualname = getattr(raw, "__qualname__", "")
    if not module or module == "__main__" or "<locals>" in qualname or module not in sys.modules:
        return raw
    found: Any = sys.modules[module]
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return TargetRef(module, qualname) if found is wrapper else raw


@dataclass(frozen=True)
class ContainerSpec:
    """What a container runs, written once per run (``spec.pkl``) and read by every attempt.

    ``target`` is the user's undecorated function or class; ``on_preempt`` is the free callback
    (functions) or the method name (classes). Everything is pickled in one go so that objects
    shared between them (a module-level Volume handle) stay one object in the container.
    """

    kind: str  # "function" | "cls"
    target: Any
    name: str
    enter: tuple[str, ...] = ()
    on_preempt: Any = None  # callable (function kind) | method name (cls kind) | None
    init_args: tuple[Any, ...] = ()
    init_kwargs: dict[str, Any] = field(default_factory=dict)
    volumes: dict[str, Any] = field(default_factory=dict)  # path -> bladekit.Volume
    preemptible: bool = True


@dataclass(frozen=True)
class Call:
    seq: int
    method: str | None  # None: the function itself
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class Close:
    """Finish after the current call and exit."""


@dataclass(frozen=True)
class Ready:
    """The container mounted its volumes and ran its enter hooks."""

    pid: int


@dataclass(frozen=True)
class StartFailed:
    """Mounting or an enter hook failed; the error is the user's (or the mount's)."""

    error: bytes | None  # pickled exception, None when it could not be pickled
    type_name: str
    traceback_text: str


@dataclass(frozen=True)
class CallResult:
    seq: int
    value: Any


@dataclass(frozen=True)
class CallFailed:
    seq: int
    error: bytes | None  # pickled exception, None when it could not be pickled
    type_name: str
    traceback_text: str


@dataclass(frozen=True)
class Preempted:
    """The container ran its on_preempt callback (or had none) and exits next."""

    notice_id: str
    callback: str | None
    callback_error: str | None  # "Type: message\ntraceback" when the callback raised
    callback_s: float
    interrupted_call: int | None  # seq of the call that was cut short, if any


Message = Call | Close | Ready | StartFailed | CallResult | CallFailed | Preempted


def dump_frame(message: Any) -> bytes:
    """One frame; raises whatever cloudpickle raises for an object it cannot pickle."""
    body: bytes = cloudpickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(body)) + body


def write_frame(fd: int, message: Any) -> None:
    data = dump_frame(message)
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def read_frame(stream: BinaryIO) -> Any | None:
    """The next message, or None at end of stream."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    body = stream.read(size)
    if len(body) < size:
        return None
    return pickle.loads(body)


def split_frames(buffer: bytearray) -> list[Any]:
    """Take every complete frame off the front of ``buffer`` (the runner reads non-blocking)."""
    messages: list[Any] = []
    while len(buffer) >= _HEADER.size:
        (size,) = _HEADER.unpack_from(buffer)
        if len(buffer) < _HEADER.size + size:
            break
        body = bytes(buffer[_HEADER.size : _HEADER.size + size])
        del buffer[: _HEADER.size + size]
        messages.append(pickle.loads(body))
    return messages
