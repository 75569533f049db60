"""The checkpoint check's primitive: walk the live state exactly as a checkpoint would, keep
nothing, and return what stands in the way."""

from __future__ import annotations

import sys
from types import FrameType

from portal.capture.problems import Problem
from portal.capture.snapshot import CaptureContext, check_position, take_snapshot
from portal.capture.usercode import UserCode

__all__ = ["active_context", "probe", "set_active_context"]

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
