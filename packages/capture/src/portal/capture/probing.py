"""The checkpoint check's primitives: walk the live state exactly as a checkpoint would, keep
nothing, and return what stands in the way; and, for ``capture_probe = full``, rehearse a real
checkpoint on this machine's disk (written whole, measured, deleted)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from types import FrameType
from typing import NamedTuple

from portal.capture.image import CheckpointImage, write_image
from portal.capture.problems import Problem
from portal.capture.snapshot import CaptureContext, check_position, take_snapshot
from portal.capture.usercode import UserCode

__all__ = [
    "Rehearsal",
    "active_context",
    "probe",
    "rehearsal_path",
    "rehearse",
    "set_active_context",
]

_ACTIVE: list[CaptureContext] = []  # runtime singleton: the context of the running script


def set_active_context(context: CaptureContext | None) -> None:
    """Called by ``portal.runtime`` once the script's context exists."""
    _ACTIVE[:] = [context] if context is not None else []


def active_context() -> CaptureContext | None:
    return _ACTIVE[0] if _ACTIVE else None


def _default_context() -> CaptureContext:
    main = sys.modules["__main__"]
    script = getattr(main, "__file__", None)
    if not script:
        raise RuntimeError("probe() needs a script: __main__ has no __file__")
    return CaptureContext(user_code=UserCode(script), main_namespace=main.__dict__)


def probe(
    frame: FrameType | None = None, *, context: CaptureContext | None = None
) -> list[Problem]:
    """Problems a checkpoint taken at ``frame`` (default: the caller's) would meet.

    A position problem (an except block, a call through C...) is returned alone, as the pause
    would wait for it first; otherwise every value the checkpoint cannot carry, each named as
    the script knows it. An empty list means a checkpoint taken here would succeed.
    """
    frame = frame if frame is not None else sys._getframe(1)
    ctx = context or active_context() or _default_context()
    position = check_position(frame, ctx)
    if isinstance(position, Problem):
        return [position]
    return take_snapshot(frame, position, ctx, keep=False).problems


class Rehearsal(NamedTuple):
    """A rehearsed checkpoint: its size on disk and the time it took to write it."""

    bytes: int
    seconds: float


def rehearsal_path(checkpoint: str | os.PathLike[str]) -> Path:
    """Where a rehearsal is written: beside the real checkpoint, on the same disk, hidden."""
    target = Path(checkpoint)
    return target.with_name(f".{target.name}.rehearsal")


def rehearse(image: CheckpointImage, path: str | os.PathLike[str]) -> Rehearsal:
    """Write ``image`` as a real checkpoint would be written (fsync included), then delete it.

    The most faithful measure of a job's checkpoint: its size on disk with every out-of-band
    buffer, and the time to write it. It cannot be cut short, which is why the node asks for it
    on on-demand machines only.
    """
    started = time.monotonic()
    try:
        size = write_image(image, path)
        return Rehearsal(size, time.monotonic() - started)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
