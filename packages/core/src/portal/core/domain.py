"""Domain objects: what Portal reasons about.

Frozen attrs classes with validators for their invariants; change them with :func:`attrs.evolve`.
Hooks take and return these. Conversion to and from wire formats (:mod:`portal.core.wire`) happens
only at the boundaries (storage, the node channel, the CLI's ``--json``).
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

__all__ = [
    "LATEST_TIME",
    "Attempt",
    "AttemptState",
    "CapacityClass",
    "CheckpointRef",
    "CheckpointState",
    "Decision",
    "Event",
    "Job",
    "JobState",
    "MachineType",
    "Notice",
    "NoticeKind",
    "Offer",
    "Verdict",
    "is_job_id",
]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def _frozen_mapping(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    # A copy, so a caller mutating its dict later cannot change a frozen object.
    return dict(value or {})


def str_tuple(value: Iterable[str]) -> tuple[str, ...]:
    """Converter: any iterable of strings to a tuple (typed, unlike ``converter=tuple``)."""
    return tuple(value)


def _non_negative(_inst: object, attribute: attrs.Attribute[Any], value: float | int) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value!r}")


#: The latest moment a notice may name: the last second of year 9999, the end of every
#: platform's clock and of every date format (a later one, ``inf`` or ``1e300``, cannot be
#: printed, and the node that printed one died of it).
LATEST_TIME = 253_402_300_799.0


def _unix_time(_inst: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not 0 <= value <= LATEST_TIME:  # nan fails too
        raise ValueError(
            f"{attribute.name} must be a time between 1970 and the year 9999 (Unix seconds), "
            f"got {value!r}"
        )


class NoticeKind(enum.StrEnum):
    """What a provider announced."""

    PREEMPTION = "preemption"  # the machine will be taken (spot reclaim, SIGTERM, local notice)
    REBALANCE = "rebalance"  # an earlier, softer warning (AWS rebalance recommendation)
    MAINTENANCE = "maintenance"  # host maintenance that stops or reboots the machine


@attrs.frozen(kw_only=True)
class Notice:
    """A notice seen by a notice source.

    ``id`` de-duplicates: a source reports the same notice on every poll with the same id.
    ``deadline`` is when the machine goes (Unix seconds), ``seen_at`` when the source first saw it.
    A source reports the withdrawal of a notice it reported earlier as the same notice with
    ``cancelled=True`` (GCP ``preempted`` flipping back, an Azure event disappearing, AWS
    maintenance ``canceled``).
    """

    id: str = attrs.field(validator=attrs.validators.min_len(1))
    source: str = attrs.field(validator=attrs.validators.min_len(1))
    provider: str = attrs.field(validator=attrs.validators.min_len(1))
    kind: NoticeKind = attrs.field(converter=NoticeKind)
    deadline: float = attrs.field(validator=_unix_time)
    seen_at: float = attrs.field(validator=_unix_time)
    cancelled: bool = False
    raw: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_mapping)

    @property
    def notice_s(self) -> float:
        """Length of the notice: from first seen to the deadline (never negative)."""
        return max(0.0, self.deadline - self.seen_at)

    def remaining_s(self, now: float) -> float:
        """Seconds left before the deadline at ``now`` (never negative)."""
        return max(0.0, self.deadline - now)

    @classmethod
    def derive_id(cls, provider: str, *parts: object) -> str:
        """A stable id for providers that give none (AWS): a hash of what identifies the notice."""
        digest = hashlib.sha256("\x1f".join([provider, *map(str, parts)]).encode()).hexdigest()
        return f"{provider}-{digest[:16]}"

    def cancel(self) -> Notice:
        """The same notice, withdrawn."""
        return attrs.evolve(self, cancelled=True)


class JobState(enum.StrEnum):
    """The states the CLI shows (``portal status``)."""

    RUNNING = "running"
    PAUSING = "pausing"
    SUSPENDED = "suspended"
    DONE = "done"
    FAILED = "failed"
    LOST = "lost"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in (JobState.DONE, JobState.FAILED, JobState.LOST, JobState.CANCELLED)


def is_job_id(value: object) -> bool:
    """Whether ``value`` can be a job id (or name): the store's rule for one path segment
    (``portal.storage.layout.check_id``). A job id names folders and objects, so ``../x``,
    ``/abs``, NUL bytes or a trailing newline never get in."""
    return isinstance(value, str) and bool(_ID.fullmatch(value)) and ".." not in value


def _job_id(_inst: object, _attr: attrs.Attribute[Any], value: str) -> None:
    if not is_job_id(value):
        raise ValueError(
            f"job id {value!r} is not valid: use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit, without '..'"
        )


def _job_name(_inst: object, _attr: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and not _NAME.fullmatch(value):
        raise ValueError(
            f"job name {value!r} is not valid: use 1-63 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )


@attrs.frozen(kw_only=True)
class Job:
    """A job: one script the user asked Portal to keep alive, across any number of attempts."""

    id: str = attrs.field(validator=_job_id)
    name: str | None = attrs.field(default=None, validator=_job_name)
    script: str = attrs.field(validator=attrs.validators.min_len(1))
    args: tuple[str, ...] = attrs.field(default=(), converter=str_tuple)
    workdir: str = attrs.field(validator=attrs.validators.min_len(1))
    created_at: float = attrs.field(validator=_non_negative)
    state: JobState = attrs.field(default=JobState.RUNNING, converter=JobState)
    #: The machine memory the job asks for (``--memory``): a machine with less never runs it.
    memory_gib: float | None = None
    #: The user's guess of its state's size (``--state-gib``), used until a figure is measured.
    state_gib: float | None = None
    #: Ranks of a torch.distributed job Portal launches (``--nproc-per-node``); None: one process.
    nproc_per_node: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(1))
    )


class AttemptState(enum.StrEnum):
    RUNNING = "running"
    SUSPENDED = "suspended"
    EXITED = "exited"
    FAILED = "failed"
    LOST = "lost"


@attrs.frozen(kw_only=True)
class Attempt:
    """One run of a job's process on one machine, from start or resume until it ends."""

    job_id: str = attrs.field(validator=attrs.validators.min_len(1))
    number: int = attrs.field(validator=attrs.validators.ge(1))
    machine: str = attrs.field(validator=attrs.validators.min_len(1))
    started_at: float = attrs.field(validator=_non_negative)
    state: AttemptState = attrs.field(default=AttemptState.RUNNING, converter=AttemptState)
    ended_at: float | None = None
    exit_code: int | None = None
    resumed_from: str | None = None  # checkpoint id


class CheckpointState(enum.StrEnum):
    COMPLETE = "complete"  # manifest written and every chunk verified on read
    INCOMPLETE = "incomplete"  # no manifest: never resumable, kept for inspection
    CORRUPT = "corrupt"  # a fingerprint or authentication check failed


@attrs.frozen(kw_only=True)
class CheckpointRef:
    """Where a checkpoint lives and what is known of it."""

    job_id: str = attrs.field(validator=attrs.validators.min_len(1))
    checkpoint_id: str = attrs.field(validator=attrs.validators.min_len(1))
    url: str = attrs.field(validator=attrs.validators.min_len(1))
    created_at: float = attrs.field(validator=_non_negative)
    size_bytes: int = attrs.field(default=0, validator=_non_negative)
    state: CheckpointState = attrs.field(
        default=CheckpointState.COMPLETE, converter=CheckpointState
    )

    @property
    def resumable(self) -> bool:
        return self.state is CheckpointState.COMPLETE


class CapacityClass(enum.StrEnum):
    SPOT = "spot"
    ON_DEMAND = "on_demand"
    RESERVED = "reserved"

    @property
    def interruptible(self) -> bool:
        return self is CapacityClass.SPOT


@attrs.frozen(kw_only=True)
class MachineType:
    """A provider's machine type, as catalogs describe it."""

    provider: str = attrs.field(validator=attrs.validators.min_len(1))
    name: str = attrs.field(validator=attrs.validators.min_len(1))
    vcpus: int = attrs.field(validator=attrs.validators.ge(1))
    memory_gib: float = attrs.field(validator=_non_negative)
    gpus: int = attrs.field(default=0, validator=_non_negative)
    gpu_model: str | None = None

    @property
    def key(self) -> str:
        return f"{self.provider}:{self.name}"


@attrs.frozen(kw_only=True)
class Offer:
    """A machine that can be had now: a type, where, its capacity class, price and notice."""

    machine_type: MachineType
    region: str = attrs.field(validator=attrs.validators.min_len(1))
    zone: str | None = None
    capacity: CapacityClass = attrs.field(converter=CapacityClass)
    price_per_hour: float = attrs.field(validator=_non_negative)
    notice_s: float | None = attrs.field(default=None)  # None for capacity that is not reclaimed

    def __attrs_post_init__(self) -> None:
        if self.capacity.interruptible and self.notice_s is None:
            raise ValueError(
                f"offer {self.describe()} is spot but has no notice_s: a spot offer must say how "
                "long its preemption notice is"
            )

    @property
    def provider(self) -> str:
        return self.machine_type.provider

    @property
    def pool(self) -> str:
        """The pool identity used to leave a reclaiming pool out of placements."""
        where = self.zone or self.region
        return f"{self.capacity}:{self.provider}:{self.machine_type.name}:{where}"

    def describe(self) -> str:
        """As events and plans name an offer: ``spot aws c7i.large (us-east-1)``."""
        capacity = (
            "spot" if self.capacity is CapacityClass.SPOT else str(self.capacity).replace("_", "-")
        )
        return f"{capacity} {self.provider} {self.machine_type.name} ({self.zone or self.region})"


@attrs.frozen(kw_only=True)
class Event:
    """One line of a job's append-only event log."""

    job_id: str = attrs.field(validator=attrs.validators.min_len(1))
    at: float = attrs.field(validator=_non_negative)
    kind: str = attrs.field(validator=attrs.validators.min_len(1))
    message: str
    data: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_mapping)
    #: The reporter's own id for this event, when it may send it more than once (a node whose
    #: report timed out retries it): the control plane records each id once. Not read back,
    #: and no part of an event's equality.
    id: str | None = attrs.field(default=None, eq=False)


class Verdict(enum.StrEnum):
    USE = "use"
    SKIP = "skip"
    WARN = "warn"
    PROVISION = "provision"
    MOVE = "move"


@attrs.frozen(kw_only=True)
class Decision:
    """What a placement policy decided about one offer (or the job), and why, with the figures."""

    policy: str = attrs.field(validator=attrs.validators.min_len(1))
    verdict: Verdict = attrs.field(converter=Verdict)
    reason: str
    offer: Offer | None = None
    figures: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_mapping)
