"""torch.distributed objects a program may hold, as a checkpoint carries them: by what they
are, never by their C++ insides (reducers keyed by type name, like the tensors'). Process groups
are :mod:`.groups`' (``reduce_group``).

- a completed ``Work`` (``async_op=True``) travels as completed, with its result; one still in
  flight defers the pause (:class:`~portal.core.specs.WaitForSafePoint`) until a line after its
  ``wait()``: a collective cannot be cut in half.
"""

from __future__ import annotations

from typing import Any

from portal.core.specs import WaitForSafePoint

__all__ = ["CompletedWork", "reduce_work"]


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
