"""torch.distributed objects a program may hold, as a checkpoint carries them: by what they
are, never by their C++ insides (reducers keyed by type name, like the tensors'). Process groups
are :mod:`.groups`' (``reduce_group``).

- a completed ``Work`` (``async_op=True``) travels as completed, with its result; one still in
  flight defers the pause (:class:`~portal.core.specs.WaitForSafePoint`) until a line after its
  ``wait()``: a collective cannot be cut in half;
- a ``TCPStore`` the program keeps comes back as a client of the resumed job's rendezvous store
  (``MASTER_ADDR``/``MASTER_PORT``, the launcher's), with its timeout: what the program stored in
  the old one is gone with it, as it is when torchrun restarts a job. Other stores (a
  ``PrefixStore`` hides its prefix, a ``FileStore`` its file's other users) are refused by name.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from typing import Any, NoReturn

from portal.capture.distributed.ddp import DistributedUnsupportedError
from portal.core.specs import WaitForSafePoint

__all__ = ["CompletedWork", "reduce_store", "reduce_tcp_store", "reduce_work", "rendezvous_store"]


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


def rendezvous_store(timeout_s: float) -> Any:
    """A client of this attempt's rendezvous store (the launcher's)."""
    distributed = sys.modules["torch"].distributed
    return distributed.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        is_master=False,
        timeout=timedelta(seconds=timeout_s),
        wait_for_workers=False,
    )


def reduce_tcp_store(store: Any) -> tuple[Any, tuple[float]]:
    return rendezvous_store, (store.timeout.total_seconds(),)


def reduce_store(store: Any) -> NoReturn:
    raise DistributedUnsupportedError(
        f"a torch.distributed {type(store).__name__} kept by the program cannot be made again "
        "at resume (only a TCPStore can: it comes back as a client of the new rendezvous); "
        "keep a TCPStore, or drop the reference once init_process_group has it"
    )
