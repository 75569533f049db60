"""What a restore in progress shares with the reducers that run inside it: the registry of
resumed code objects, and the rebuilds deferred to the end of the restore.

A leaf of the capture package (it imports none of it): the pickler's reducers (generators,
caches, files) need these while :mod:`portal.capture.resume` needs the pickler, so they live
here rather than in either.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from types import CodeType
from typing import NamedTuple

__all__ = [
    "LIVE_PORTAL",
    "RESUMED_CODE",
    "PortalMethod",
    "ResumedInfo",
    "after_restore",
    "deferring",
    "portal_key",
    "register_live",
]


class ResumedInfo(NamedTuple):
    """How a resumed code object maps back to the original (see :mod:`portal.capture.resume`)."""

    code: CodeType
    original: CodeType
    prologue: int
    resume_at: int  # original offsets of the frame's continuation and pending call
    call_at: int | None


#: Runtime singleton: resumed code objects by ``id`` -> how they map to the original code, so a
#: resumed program can pause again (including frames still waiting inside their prologue call).
#: Entries keep their code objects alive, so an ``id`` is never reused while it is listed.
RESUMED_CODE: dict[int, ResumedInfo] = {}


#: Runtime singleton: one list per restore in progress (:func:`deferring`), of the rebuilds
#: deferred to the end of its extensions' restore (see :func:`after_restore`).
_DEFERRED: list[list[Callable[[], None]]] = []


@contextlib.contextmanager
def deferring() -> Iterator[list[Callable[[], None]]]:
    """A restore in progress (:func:`portal.capture.resume.restore`): :func:`after_restore`
    collects into the list yielded, which the restore runs once its extensions are back."""
    deferred: list[Callable[[], None]] = []
    _DEFERRED.append(deferred)
    try:
        yield deferred
    finally:
        _DEFERRED.pop()


def after_restore(rebuild: Callable[[], None]) -> None:
    """Run ``rebuild`` once the checkpoint being restored has its capture extensions back
    (after every one of them, before the frames are rebuilt and the program
    continues); rebuilds run in the order they were asked for, which is the order the pickle
    made their objects (an object's parts first). For a function the pickle calls while
    loading, whose object needs the process-level state back first (an open file of the working
    directory, which a new machine has only once ``workdir_files`` restored it): it makes a
    stand-in of the object at once and asks for the rest here. Outside a restore (a plain
    ``pickle.loads``) it runs now."""
    if _DEFERRED:
        _DEFERRED[-1].append(rebuild)
    else:
        rebuild()


#: Runtime singleton: Portal's live objects whose methods are signal handlers (the engine, the
#: control channel), by their type's qualified name (see :class:`PortalMethod`).
LIVE_PORTAL: dict[str, object] = {}


def portal_key(obj: object) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def register_live(obj: object) -> None:
    """``obj`` is this process's live instance of its (Portal) type (called when it starts)."""
    LIVE_PORTAL[portal_key(obj)] = obj


class PortalMethod:
    """A method of one of Portal's live objects that the program's state holds: a library that
    chains or saves signal handlers keeps the ones it replaced (Lightning's ``_HandlersCompose``
    keeps Portal's ``SIGTERM`` handler, which asks for the pause; its ``_SignalConnector`` saves
    every handler, Portal's ``SIGIO`` too, to put back when ``fit`` ends). Those objects are the
    process's own, so the method travels as this: the same method of whatever instance is live
    in the process it runs in (nothing where none is)."""

    __slots__ = ("name", "owner")

    def __init__(self, owner: str, name: str) -> None:
        self.owner = owner
        self.name = name

    def __call__(self, *args: object) -> object:
        live = LIVE_PORTAL.get(self.owner)
        if live is None:
            return None
        return getattr(live, self.name)(*args)

    def __reduce__(self) -> tuple[type[PortalMethod], tuple[str, str]]:
        return (PortalMethod, (self.owner, self.name))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PortalMethod) and (other.owner, other.name) == (
            self.owner,
            self.name,
        )

    def __hash__(self) -> int:
        return hash((self.owner, self.name))

    def __repr__(self) -> str:
        return f"<Portal's {self.owner.rpartition('.')[2]}.{self.name}>"
