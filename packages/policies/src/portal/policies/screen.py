"""The rules every policy applies to an offer before its own: reclaimed pools and the state bound.

Resume, move, cheaper, return and spot all leave out a pool that reclaimed a machine in the last
30 minutes, and every spot offer whose notice cannot save the job's state. Keeping the rules in
one place keeps them (and their wording) the same in every policy and in the plan. An exact
``--on`` is the user's choice: the offer is kept, with the warning the skip would have given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from portal.core.domain import Decision, Job, Offer, Verdict
from portal.core.specs import PlacementContext, StateMeasure
from portal.policies import wording
from portal.policies.bound import Bound, Bounds
from portal.policies.exclusions import EXCLUDED_UNTIL
from portal.policies.measure import GIB, Figure, figure_of, margin
from portal.policies.options import PlacementOptions

__all__ = ["Rule", "Screen", "Screened", "acts_on", "fits", "is_over", "room_on"]


class Rule:
    """The ``rule`` figure of a skip: which rule left the offer out (events pick by it)."""

    STATE_BOUND = "state_bound"
    EXCLUDED_POOL = "excluded_pool"
    GPU = "gpu"
    MEMORY = "memory"
    NO_SPOT = "no_spot"
    SPOT_ONLY = "spot_only"
    ON = "on"
    PRICE = "price"
    CAPACITY = "capacity"


def is_over(measure: StateMeasure, bound: Bound) -> bool:
    """The state is more than the notice can save (whatever the figure)."""
    return measure.bytes > bound.bytes


def acts_on(measure: StateMeasure, bound: Bound) -> bool:
    """Portal leaves out (or moves off) a spot offer on this measure.

    Never on what a job asked for (a guess); on the node's memory figure only a quarter over the
    bound (it overstates a checkpoint); on a checkpoint's bytes as soon as they are over.
    """
    if figure_of(measure) is Figure.ASKED_FOR:
        return False
    return measure.bytes > bound.bytes * margin(measure)


def fits(target: Offer, current: Offer, measure: StateMeasure, job: Job | None = None) -> bool:
    """Whether ``target`` can hold the job: memory for its state and at least the memory it asked
    for (``--memory``: a machine with less is never chosen), and the GPUs it runs on now."""
    if target.machine_type.memory_gib * GIB < measure.bytes:
        return False
    if (
        job is not None
        and job.memory_gib is not None
        and target.machine_type.memory_gib < job.memory_gib
    ):
        return False
    model = current.machine_type.gpu_model
    if current.machine_type.gpus and model is not None:
        return (
            target.machine_type.gpu_model == model
            and target.machine_type.gpus >= current.machine_type.gpus
        )
    return True


#: A running job moves onto spot only when its state is at most this share of the offer's bound:
#: a job near the bound would otherwise go back and forth between spot and on-demand.
ONTO_SPOT_MARGIN = 0.8


def room_on(measure: StateMeasure, bound: Bound | None) -> bool:
    """Whether a running job may move onto a spot offer of ``bound``: its notice can save the
    state with a fifth to spare (:data:`ONTO_SPOT_MARGIN`)."""
    return bound is not None and measure.bytes <= bound.bytes * ONTO_SPOT_MARGIN


@attrs.frozen(kw_only=True)
class Screened:
    """One offer after the shared rules: left out (``clause`` and ``rule``) or kept, with warnings."""

    offer: Offer
    bound: Bound | None
    figures: Mapping[str, Any]
    clause: str | None = None
    rule: str | None = None
    warnings: tuple[str, ...] = ()

    @property
    def kept(self) -> bool:
        return self.clause is None

    def skip(self, policy: str) -> Decision:
        assert self.clause is not None
        return Decision(
            policy=policy,
            verdict=Verdict.SKIP,
            reason=wording.skipped(self.offer, self.clause),
            offer=self.offer,
            figures={**self.figures, "rule": self.rule},
        )

    def warns(self, policy: str) -> list[Decision]:
        return [
            Decision(
                policy=policy,
                verdict=Verdict.WARN,
                reason=text,
                offer=self.offer,
                figures=self.figures,
            )
            for text in self.warnings
        ]


class Screen:
    """Applies the shared rules for one job, one measure, one context."""

    def __init__(
        self,
        bounds: Bounds,
        context: PlacementContext,
        options: PlacementOptions,
        measure: StateMeasure | None,
    ) -> None:
        self.bounds = bounds
        self.context = context
        self.options = options
        self.measure = measure
        until = context.settings.get(EXCLUDED_UNTIL) or {}
        self._until: Mapping[str, float] = until if isinstance(until, Mapping) else {}

    def bound_of(self, offer: Offer) -> Bound | None:
        return self.bounds.of(offer, self.options.route_for(offer))

    def figures(self, offer: Offer, bound: Bound | None) -> dict[str, Any]:
        """What a decision about ``offer`` carries for ``portal explain --json``."""
        figures: dict[str, Any] = {"pool": offer.pool, "price_per_hour": offer.price_per_hour}
        if self.measure is not None:
            figures.update(state_bytes=self.measure.bytes, figure=self.measure.figure)
        if bound is not None:
            figures.update(bound.figures())
        return figures

    def one(self, offer: Offer) -> Screened:
        bound = self.bound_of(offer)
        figures = self.figures(offer, bound)
        pinned = self.options.pinned(offer)
        spec = self.options.on.text if self.options.on is not None else ""
        warnings: list[str] = []
        if offer.pool in self.context.excluded_pools:
            if not pinned:
                return Screened(
                    offer=offer,
                    bound=bound,
                    figures=figures,
                    clause=wording.excluded(self._until.get(offer.pool)),
                    rule=Rule.EXCLUDED_POOL,
                )
            warnings.append(wording.excluded_pinned(offer, spec))
        measure = self.measure
        if bound is not None and measure is not None and is_over(measure, bound):
            if pinned:
                warnings.append(wording.pinned_over(offer, spec, measure, bound))
            elif acts_on(measure, bound):
                return Screened(
                    offer=offer,
                    bound=bound,
                    figures=figures,
                    clause=wording.over_bound(measure, bound),
                    rule=Rule.STATE_BOUND,
                )
            elif figure_of(measure) is Figure.ASKED_FOR:
                warnings.append(wording.asked_over(offer, measure, bound))
            else:
                warnings.append(wording.resident_near(offer, measure, bound))
        return Screened(offer=offer, bound=bound, figures=figures, warnings=tuple(warnings))

    def drop(self, screened: Screened, clause: str, rule: str) -> Screened:
        """``screened`` left out by a policy's own rule (price, capacity, a flag)."""
        return attrs.evolve(screened, clause=clause, rule=rule, warnings=())
