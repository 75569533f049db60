"""torch.distributed objects a program may hold, as a checkpoint carries them: by what they
are, never by their C++ insides (reducers keyed by type name, like the tensors').

- a process group travels as "the default group" or "group #k of the log" of the groups the
  program made (:mod:`.groups`), and is that group again once the resumed rank replayed the log;
- a completed ``Work`` (``async_op=True``) travels as completed, with its result; one still in
  flight defers the pause (:class:`~portal.core.specs.WaitForSafePoint`) until a line after its
  ``wait()``: a collective cannot be cut in half.
"""

from __future__ import annotations

import sys
from typing import Any

from portal.core.specs import WaitForSafePoint

__all__ = ["CompletedWork", "default_group", "reduce_group", "reduce_work"]


def _distributed() -> Any:
    return sys.modules["torch"].distributed


def default_group() -> Any:
    """This process's default process group (made again by the resumed rank)."""
    return _distributed().distributed_c10d._get_default_group()


def reduce_group(group: Any) -> tuple[Any, tuple[Any, ...]]:
    """A process group: the default one, or one of the logged groups (see :mod:`.groups`)."""
    from portal.capture.distributed import groups

    return groups.reduce_group(group)


class CompletedWork:
    """A collective's ``Work`` that had completed when its checkpoint was taken: waiting on it
    again returns at once, as on the original."""

    def __init__(self, result: list[Any]) -> None:
        self._result = result

    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def exception(self) -> None:
        return None

    def result(self) -> list[Any]:
        return self._result

    def synchronize(self) -> None:
        return None


def reduce_work(work: Any) -> tuple[Any, tuple[list[Any]]]:
    if not work.is_completed():
        raise WaitForSafePoint(
            "an asynchronous collective (async_op=True) is still in flight; the pause waits for "
            "a line after its wait()",
            ready=work.is_completed,
        )
    try:
        result = list(work.result())
    except RuntimeError:  # some collectives keep no result
        result = []
    return CompletedWork, (result,)
