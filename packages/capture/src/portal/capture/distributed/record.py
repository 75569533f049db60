"""What a rank's checkpoint says about its place in the job, read before its state loads.

A rank's part is an ordinary checkpoint image whose header also carries a :class:`RankRecord`:
the resumed rank needs it *before* the pickle loads (the pickle refers to process groups, which
must exist by then), so it cannot travel inside the pickle. Plain data only (msgspec, in the
image's JSON header).
"""

from __future__ import annotations

import msgspec

__all__ = ["GroupCall", "RankRecord"]


class GroupCall(msgspec.Struct, frozen=True, kw_only=True):
    """One ``new_group`` call, as it can be made again."""

    ranks: tuple[int, ...] | None = None
    backend: str | None = None
    timeout_s: float | None = None
    description: str | None = None


class RankRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One rank of a multi-process job, as its part of the job's checkpoint set records it."""

    rank: int
    world_size: int
    #: ``init_process_group``'s backend ("gloo", "nccl", "cpu:gloo,cuda:nccl") and timeout.
    backend: str
    timeout_s: float | None = None
    #: The groups the program made with ``new_group``, in order (replayed at resume).
    groups: list[GroupCall] = msgspec.field(default_factory=list)
    #: Each group's issued collectives at the pause (the default group first): the cut.
    counts: list[int] = msgspec.field(default_factory=list)
    torch: str = ""
