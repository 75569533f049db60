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

__all__ = ["RESUMED_CODE", "ResumedInfo", "after_restore", "deferring"]


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
