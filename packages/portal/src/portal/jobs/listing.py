"""The list of jobs and a job's account of its notices, as typed values: what
:meth:`portal.jobs.Portal.jobs` and :meth:`portal.jobs.Portal.explain` return.

As for :mod:`portal.jobs.status`, the read views (:class:`portal.control.views.JobViews`)
build the objects ``portal jobs --json`` and ``portal explain JOB --json`` print (the console
and the MCP server show the same); ``from_json`` types one and ``to_json`` gives it back key for
key. A key the views add later and these classes do not know fails ``from_json`` loudly (a
test holds the two equal), never drops silently. A row another tool's plugin lists (bladekit's
runs, through the ``portal_job_listings`` hook) is typed the same way: the hook asks for these
keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from portal.jobs.status import json_shapes

__all__ = [
    "Decision",
    "Explanation",
    "JobSummary",
    "ListedCheckpoint",
    "NoticeAccount",
    "PolicyDecision",
]


@attrs.frozen
class ListedCheckpoint:
    """The last checkpoint the control plane recorded as stored (``bytes`` None when no event
    gave it; ``id`` None for a tool whose checkpoints have none)."""

    id: str | None
    bytes: int | None
    created_at: float | None


@attrs.frozen
class JobSummary:
    """One row of ``portal jobs`` (docs/cli-json.md): a job of Portal's, or another tool's
    (``source``). ``state`` is the state's word, as the row prints it."""

    job: str
    name: str | None
    state: str
    script: str
    created_at: float | None
    started_at: float | None
    ended_at: float | None
    duration_s: float | None
    attempts: int
    recoveries: int
    machine: str | None
    last_checkpoint: ListedCheckpoint | None
    carry: str | None
    error: str | None
    source: str

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> JobSummary:
        """A row of the views' list, typed (a key this class does not know raises
        ``TypeError``)."""
        fields = dict(row)
        last = fields.pop("last_checkpoint", None)
        return cls(last_checkpoint=None if last is None else ListedCheckpoint(**last), **fields)

    def to_json(self) -> dict[str, Any]:
        """The row ``portal jobs --json`` prints, key for key."""
        return attrs.asdict(self)


@attrs.frozen
class Decision:
    """What was decided at a notice: an event of the job's log after it."""

    at: float
    kind: str
    message: str


@attrs.frozen
class NoticeAccount:
    """One notice the job got (who sent it, how long it gave) and what was decided at it."""

    at: float
    message: str
    provider: str | None
    source: str | None
    notice_s: float
    deadline: float
    decisions: tuple[Decision, ...]


@attrs.frozen
class PolicyDecision:
    """A decision of a policy's: the checkpoint check's (``warn``, ``ok``...) or placement's."""

    decision: str
    policy: str
    at: float
    kind: str
    message: str


@attrs.frozen
class Explanation:
    """``portal explain JOB --json``: every notice and what was decided at it, the checkpoint
    check's decisions and placement's."""

    job: str
    notices: tuple[NoticeAccount, ...]
    checkpoint_check: tuple[PolicyDecision, ...]
    placement: tuple[PolicyDecision, ...]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Explanation:
        """The views' object, typed (a key this class does not know raises ``TypeError``)."""
        fields = dict(data)
        notices = tuple(
            NoticeAccount(
                **{
                    **notice,
                    "decisions": tuple(Decision(**d) for d in notice["decisions"]),
                }
            )
            for notice in fields.pop("notices")
        )
        return cls(
            notices=notices,
            checkpoint_check=tuple(PolicyDecision(**c) for c in fields.pop("checkpoint_check")),
            placement=tuple(PolicyDecision(**p) for p in fields.pop("placement", ())),
            **fields,
        )

    def to_json(self) -> dict[str, Any]:
        """The object ``portal explain JOB --json`` prints, key for key."""
        found = json_shapes(attrs.asdict(self))
        assert isinstance(found, dict)
        return found
