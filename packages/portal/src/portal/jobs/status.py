"""A job's status as typed values: what :meth:`portal.jobs.Portal.status` returns.

The read views (:class:`portal.control.views.JobViews`) build the object ``portal status JOB
--json`` prints, whose schema docs/cli-json.md promises; :meth:`JobStatus.from_json` types it
and :meth:`JobStatus.to_json` gives it back key for key, so the command, the MCP server and an
embedder read one account. A key the views add later and these classes do not know yet fails
:meth:`JobStatus.from_json` loudly (a test holds the two equal), never drops silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from portal.core.domain import JobState

__all__ = [
    "AttemptStatus",
    "CarryBlocked",
    "CarryStatus",
    "CheckpointRef",
    "DamagedCheckpoint",
    "IncompleteCheckpoint",
    "JobStatus",
    "KeptCheckpoint",
]


@attrs.frozen
class AttemptStatus:
    """One attempt: where it ran, how it ended, and the checkpoint it resumed from."""

    number: int
    machine: str | None
    state: str
    started_at: float | None
    ended_at: float | None
    exit_code: int | None
    resumed_from: str | None


@attrs.frozen
class CheckpointRef:
    """The newest checkpoint a resume would use (``bytes`` None when no event gave it)."""

    id: str
    bytes: int | None
    created_at: float | None


@attrs.frozen
class IncompleteCheckpoint:
    """A checkpoint whose upload was cut short: kept for inspection, never resumed from."""

    id: str
    resumable: bool
    note: str


@attrs.frozen
class DamagedCheckpoint:
    """A checkpoint stored whole once, no longer intact (``damaged``) or there (``missing``)."""

    id: str
    state: str
    why: str


@attrs.frozen
class KeptCheckpoint:
    """A paused attempt's checkpoint file kept on this machine: its upload failed."""

    path: str
    attempt: int
    bytes: int


@attrs.frozen
class CarryBlocked:
    """Checks blocked for good: since when, after how long, and why."""

    since: float
    after_s: float | None
    reasons: tuple[str, ...]
    message: str


@attrs.frozen
class CarryStatus:
    """The checkpoint check's verdict: ``ok`` None until a check finished; each value it could
    not carry (as the check reported it); the sentence of the outstanding warning."""

    ok: bool | None
    problems: tuple[Mapping[str, Any], ...]
    blocked: CarryBlocked | None
    warning: str | None
    checked_at: float | None


def json_shapes(value: Any) -> Any:
    """JSON's shapes: tuples as lists, a state as its string (the ``to_json`` of these typed
    accounts, and of :mod:`portal.jobs.listing`'s)."""
    if isinstance(value, JobState):
        return str(value)
    if isinstance(value, Mapping):
        return {k: json_shapes(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_shapes(v) for v in value]
    return value


def _each(cls: type[Any], items: Any) -> tuple[Any, ...]:
    return tuple(cls(**item) for item in items)


def _one(cls: type[Any], item: Mapping[str, Any] | None) -> Any:
    return None if item is None else cls(**item)


@attrs.frozen
class JobStatus:
    """A job's state, attempts, checkpoints and checkpoint check (docs/cli-json.md,
    ``portal status JOB --json``)."""

    job: str
    name: str | None
    state: JobState
    script: str
    args: tuple[str, ...]
    ranks: int
    workdir: str | None
    attempts: tuple[AttemptStatus, ...]
    last_checkpoint: CheckpointRef | None
    last_heard: float | None
    waiting_for: str | None
    incomplete_checkpoints: tuple[IncompleteCheckpoint, ...]
    damaged_checkpoints: tuple[DamagedCheckpoint, ...]
    kept_checkpoint: KeptCheckpoint | None
    carry: CarryStatus
    lost_during_notice: bool
    error: str | None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobStatus:
        """The views' object, typed (a key this class does not know raises ``TypeError``)."""
        fields = dict(data)
        carry = dict(fields.pop("carry"))
        blocked = carry.pop("blocked")
        return cls(
            state=JobState(fields.pop("state")),
            args=tuple(fields.pop("args")),
            attempts=_each(AttemptStatus, fields.pop("attempts")),
            last_checkpoint=_one(CheckpointRef, fields.pop("last_checkpoint")),
            incomplete_checkpoints=_each(
                IncompleteCheckpoint, fields.pop("incomplete_checkpoints")
            ),
            damaged_checkpoints=_each(DamagedCheckpoint, fields.pop("damaged_checkpoints")),
            kept_checkpoint=_one(KeptCheckpoint, fields.pop("kept_checkpoint")),
            carry=CarryStatus(
                problems=tuple(carry.pop("problems")),
                blocked=None
                if blocked is None
                else CarryBlocked(**{**blocked, "reasons": tuple(blocked["reasons"])}),
                **carry,
            ),
            **fields,
        )

    def to_json(self) -> dict[str, Any]:
        """The object ``portal status JOB --json`` prints, key for key."""
        found = json_shapes(attrs.asdict(self))
        assert isinstance(found, dict)
        return found

    @property
    def last_attempt(self) -> AttemptStatus | None:
        return self.attempts[-1] if self.attempts else None
