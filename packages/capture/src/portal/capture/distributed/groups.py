"""The process groups of a rank, re-created at resume from a log of how they were made.

A process group is a C++ object holding sockets (and NCCL communicators): it is never captured.
What a rank needs at resume is the same groups, made the same way in the same order, so that
torch names them alike on every rank and the program's references point at them again:

- :func:`record` wraps ``torch.distributed.new_group`` so that each group the program makes is
  logged (its ranks, backend, timeout, description) and known by its index in the log;
- the checkpoint carries a group as "the default group" or "group #k of the log"
  (:func:`reduce_group`), and the log itself;
- :func:`replay`, in the resumed rank and before its state loads, makes the default group on the
  new rendezvous store and then every logged group again, in order (``new_group`` is collective:
  every rank replays every call, as every rank made it).

Options the log cannot carry (``pg_options``, which hold C++ objects) are refused by name when
the group is made, not at the pause.
"""

from __future__ import annotations

import functools
import sys
import weakref
from datetime import timedelta
from typing import Any

import attrs

from portal.capture.distributed.ddp import DistributedUnsupportedError
from portal.capture.distributed.record import GroupCall

__all__ = [
    "GroupCall",
    "GroupLog",
    "default_group",
    "record",
    "reduce_group",
    "replay",
    "replayed_group",
]


@attrs.define
class GroupLog:
    """The groups this rank made, in order; ``groups`` maps a live group to its index."""

    calls: list[GroupCall] = attrs.field(factory=list)
    groups: weakref.WeakKeyDictionary[Any, int] = attrs.field(
        factory=weakref.WeakKeyDictionary, repr=False, eq=False
    )

    def __getstate__(self) -> dict[str, Any]:
        return {"calls": list(self.calls)}  # the live groups stay behind

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.calls = list(state["calls"])
        self.groups = weakref.WeakKeyDictionary()


#: This process's log (made by :func:`record`, filled again by :func:`replay`).
_LOG = GroupLog()
#: The groups :func:`replay` made, by index in the log.
_REPLAYED: list[Any] = []


def _distributed() -> Any:
    return sys.modules["torch"].distributed


def default_group() -> Any:
    """This process's default process group (made again by the resumed rank)."""
    return _distributed().distributed_c10d._get_default_group()


def record() -> GroupLog:
    """Log every group the program makes from now on (idempotent); return the log."""
    distributed = _distributed()
    original = distributed.new_group
    if getattr(original, "__portal_recorded__", False):
        return _LOG

    @functools.wraps(original)
    def new_group(
        ranks: Any = None,
        timeout: timedelta | None = None,
        backend: Any = None,
        pg_options: Any = None,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        if pg_options is not None:
            raise DistributedUnsupportedError(
                "new_group(pg_options=...) holds backend objects Portal cannot make again at "
                "resume; make the group without pg_options, or checkpoint in your own code with "
                "torch.distributed.checkpoint"
            )
        group = original(ranks, timeout, backend, None, *args, **kwargs)
        call = GroupCall(
            ranks=None if ranks is None else tuple(int(r) for r in ranks),
            backend=None if backend is None else str(backend),
            timeout_s=None if timeout is None else timeout.total_seconds(),
            description=kwargs.get("group_desc"),
        )
        _LOG.calls.append(call)
        if group is not None and not _is_non_member(group):
            _LOG.groups[group] = len(_LOG.calls) - 1
        return group

    new_group.__portal_recorded__ = True  # type: ignore[attr-defined]
    distributed.new_group = new_group
    return _LOG


def _is_non_member(group: Any) -> bool:
    """``new_group`` answers a rank outside the group with a marker (an int), not a group."""
    return isinstance(group, int) and group == _distributed().GroupMember.NON_GROUP_MEMBER


def replay(
    log: GroupLog,
    *,
    backend: str | None,
    store: Any = None,
    rank: int = -1,
    world_size: int = -1,
    timeout_s: float | None = None,
) -> list[Any]:
    """Make the default group (on ``store``; None: ``env://``, the launcher's rendezvous),
    then every logged group in order, as the program did; return them by index (None where
    this rank is not a member)."""
    distributed = _distributed()
    kwargs: dict[str, Any] = {"rank": rank, "world_size": world_size}
    if store is not None:
        kwargs["store"] = store
    if timeout_s is not None:
        kwargs["timeout"] = timedelta(seconds=timeout_s)
    distributed.init_process_group(backend, **kwargs)
    made: list[Any] = []
    for call in log.calls:
        timeout = None if call.timeout_s is None else timedelta(seconds=call.timeout_s)
        extra = {} if call.description is None else {"group_desc": call.description}
        group = distributed.new_group(
            None if call.ranks is None else list(call.ranks), timeout, call.backend, **extra
        )
        made.append(None if group is None or _is_non_member(group) else group)
    _REPLAYED[:] = made
    _LOG.calls = list(log.calls)
    _LOG.groups = weakref.WeakKeyDictionary(
        {group: i for i, group in enumerate(made) if group is not None}
    )
    return made


def replayed_group(index: int) -> Any:
    """Group ``index`` of the log, as :func:`replay` made it again."""
    try:
        group = _REPLAYED[index]
    except IndexError:
        raise DistributedUnsupportedError(
            f"the checkpoint refers to process group #{index}, which the resumed rank did not "
            "make again: replay the group log before loading a rank's state"
        ) from None
    return group


def reduce_group(group: Any) -> tuple[Any, tuple[Any, ...]]:
    """A process group in a checkpoint: the default group, or group #k of the log."""
    if group is default_group():
        return default_group, ()
    index = _LOG.groups.get(group)
    if index is None:
        raise DistributedUnsupportedError(
            "a process group Portal did not see made (made before Portal's record() started, "
            "or by another library's own means) cannot be re-created at resume; make groups "
            "with torch.distributed.new_group once Portal runs the script"
        )
    return replayed_group, (index,)
