"""The state's measure: how big a job's state is, and which figure says so.

A measure is never a bare number: every warning, plan line and event names the figure it used,
because the figures differ in how much they can be trusted. A checkpoint's bytes (as stored, from
the check's rehearsal or walk, or the last move's capsule) are the real thing, plus a tenth for growth
since. The memory the node reports overstates a checkpoint (allocator slack, caches, CUDA context),
so Portal acts on it alone only when it is a quarter over the bound. What the job asked for is a
guess: it earns a warning, never a refusal.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable

import attrs

from portal.core.domain import Job
from portal.core.errors import InvalidArgumentError
from portal.core.specs import StateMeasure

__all__ = [
    "GROWTH",
    "RESIDENT_MARGIN",
    "Figure",
    "StateSample",
    "choose",
    "figure_of",
    "margin",
    "measure_job",
]

GIB = 2**30
#: Added to a checkpoint's bytes for the state's growth since it was taken.
GROWTH = 0.1
#: How far over the bound the node's memory figure must be before Portal acts on it alone.
RESIDENT_MARGIN = 1.25


class Figure(enum.StrEnum):
    """The named figures, in the words events and plans use."""

    CHECKPOINT_AS_STORED = "its checkpoint as stored"
    REHEARSAL = "the check's rehearsal"
    #: The bytes the checkpoint check's walk pickled (capture_probe = on: nothing written).
    CHECK_WALK = "the check's walk"
    LAST_MOVE_CAPSULE = "the last move's capsule"
    RESIDENT_AND_GPU = "its resident and GPU memory now"
    ASKED_FOR = "what it asked for"

    @property
    def is_checkpoint(self) -> bool:
        """A checkpoint's bytes: the figure Portal trusts most."""
        return self in _CHECKPOINTS

    @property
    def is_guess(self) -> bool:
        """What the job asked for: warned about, never acted on."""
        return self is Figure.ASKED_FOR


_CHECKPOINTS = frozenset(
    {Figure.CHECKPOINT_AS_STORED, Figure.REHEARSAL, Figure.CHECK_WALK, Figure.LAST_MOVE_CAPSULE}
)
#: Among checkpoint figures taken at the same moment, the one listed first wins.
_ORDER = (
    Figure.CHECKPOINT_AS_STORED,
    Figure.REHEARSAL,
    Figure.CHECK_WALK,
    Figure.LAST_MOVE_CAPSULE,
)


def _non_negative_int(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 0:
        raise InvalidArgumentError(
            f"a state size is never negative, got {attribute.name}={value!r}; check what "
            "reported it (the node, the checkpoint store or the job's request)",
            details={attribute.name: value},
        )


@attrs.frozen(kw_only=True)
class StateSample:
    """One raw figure as reported: ``bytes`` as seen (no growth added), ``at`` when (Unix s)."""

    figure: Figure = attrs.field(converter=Figure)
    bytes: int = attrs.field(validator=_non_negative_int)
    at: float = 0.0

    def measure(self) -> StateMeasure:
        """The measure this sample gives: a checkpoint's bytes plus a tenth, others as they are."""
        size = math.ceil(self.bytes * (1 + GROWTH)) if self.figure.is_checkpoint else self.bytes
        return StateMeasure(bytes=size, figure=str(self.figure))


def choose(samples: Iterable[StateSample]) -> StateMeasure | None:
    """The measure that decides, from every sample known about a job.

    A checkpoint's bytes beat the node's memory figure, which beats what the job asked for.
    Among checkpoints the latest wins (a job grows; an old checkpoint understates it).
    """
    pool = list(samples)
    if not pool:
        return None
    checkpoints = [s for s in pool if s.figure.is_checkpoint]
    if checkpoints:
        best = max(checkpoints, key=lambda s: (s.at, -_ORDER.index(s.figure)))
        return best.measure()
    resident = [s for s in pool if s.figure is Figure.RESIDENT_AND_GPU]
    if resident:
        return max(resident, key=lambda s: s.at).measure()
    return max(pool, key=lambda s: s.at).measure()


def measure_job(job: Job, state: StateMeasure | None) -> StateMeasure | None:
    """The measure a policy uses: the context's, else the job's own guess of its state's size
    (``--state-gib``), else none. ``--memory`` is the machine's memory the job asks for, not a
    size of its state: it bounds which machines run it (:func:`portal.policies.screen.fits`)."""
    if state is not None:
        figure_of(state)  # refuse an unnamed figure early, with the list of names
        return state
    if job.state_gib is None:
        return None
    if job.state_gib < 0:
        raise InvalidArgumentError(
            f"job {job.id} guesses its state at {job.state_gib!r} GiB; a size is never "
            "negative. Fix the job's --state-gib",
            details={"job": job.id, "state_gib": job.state_gib},
        )
    return StateMeasure(bytes=math.ceil(job.state_gib * GIB), figure=str(Figure.ASKED_FOR))


def figure_of(measure: StateMeasure) -> Figure:
    """The named figure of a measure; an unknown name is refused (it would mislead every line)."""
    try:
        return Figure(measure.figure)
    except ValueError:
        raise InvalidArgumentError(
            f"state measure figure {measure.figure!r} is not one Portal names; use one of: "
            f"{'; '.join(repr(str(f)) for f in Figure)}",
            details={"figure": measure.figure},
        ) from None


def margin(measure: StateMeasure) -> float:
    """How far over the bound the measure must be before Portal acts on it (1.25 for memory)."""
    return RESIDENT_MARGIN if figure_of(measure) is Figure.RESIDENT_AND_GPU else 1.0
