"""The spot policy: place a job on spot where its notice can save its state, and move it off
spot when its state outgrows the notice.

Placing: spot offers cheapest first, then on-demand ones as the fallback; a spot offer whose
notice cannot save the measured state is left out, and a new job whose request is over the bound
is placed with a warning (what it asks for is a guess).

Move when over (:meth:`SpotPolicy.watch`, asked by the node at every check): a job running on
spot whose latest measure is over its machine's bound is moved to the cheapest on-demand machine
that fits. The policy answers ``provision`` (ahead) then ``move`` (once ready), each naming the
figure and the bound. It is a pure function of the latest measure, so a job that grows after a
first warning is caught at the next check. ``spot.move_when_over: false`` turns it off; a job
pinned by an exact ``--on``, or run ``--spot-only``, stays, warned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from portal.core.domain import CapacityClass, Decision, Job, Offer, Verdict
from portal.core.specs import PlacementContext, PlacementPolicy
from portal.policies import wording
from portal.policies.base import Policy, cheapest_first
from portal.policies.options import PlacementOptions
from portal.policies.screen import Screen, acts_on, fits

__all__ = ["SpotPolicy", "fits"]


class SpotPolicy(Policy):
    name = "spot"

    def evaluate(
        self, job: Job, offers: Sequence[Offer], context: PlacementContext
    ) -> list[Decision]:
        screen, options = self.screen(job, context)
        results = [screen.one(offer) for offer in offers]
        kept = [r for r in results if r.kept]
        ranked = [r for r in cheapest_first(kept) if r.offer.capacity.interruptible] + [
            r for r in cheapest_first(kept) if not r.offer.capacity.interruptible
        ]
        decisions = self.move_when_over(offers, screen, options, job)
        decisions += self.assemble(
            [(r, self.plain_reason(r)) for r in ranked], [r for r in results if not r.kept]
        )
        return decisions

    def watch(self, job: Job, offers: Sequence[Offer], context: PlacementContext) -> list[Decision]:
        """What to do now about ``job`` running on the context's current offer
        (:class:`~portal.core.specs.RunningJobPolicy`): move it off spot when over, or warn."""
        screen, options = self.screen(job, context)
        return self.move_when_over(offers, screen, options, job)

    def move_when_over(
        self,
        offers: Sequence[Offer],
        screen: Screen,
        options: PlacementOptions,
        job: Job | None = None,
    ) -> list[Decision]:
        """``provision`` then ``move`` when the job's spot machine cannot save its state."""
        current, measure = options.current, screen.measure
        if current is None or measure is None:
            return []
        bound = screen.bound_of(current)
        if bound is None or not acts_on(measure, bound):
            return []
        figures = screen.figures(current, bound)
        if options.pinned(current):
            spec = options.on.text if options.on is not None else ""
            return [
                self._warn(wording.kept_pinned(current, spec, measure, bound), current, figures)
            ]
        if not options.move_when_over:
            return [self._warn(wording.kept_move_off(current, measure, bound), current, figures)]
        targets = [
            o
            for o in offers
            if o.capacity is CapacityClass.ON_DEMAND
            and o.pool not in screen.context.excluded_pools
            and fits(o, current, measure, job)
        ]
        if not targets:
            return [self._warn(wording.kept_no_fit(current, measure, bound), current, figures)]
        if options.spot_only:  # on-demand is not this job's to take
            return [self._warn(wording.kept_spot_only(current, measure, bound), current, figures)]
        target = min(targets, key=lambda o: (o.price_per_hour, o.describe()))
        return self.provision_then_move(
            target,
            current,
            provision=wording.provision(target, current, measure, bound),
            move=wording.move(target, current, measure, bound),
            figures=figures,
        )

    def _warn(self, reason: str, offer: Offer, figures: Mapping[str, Any]) -> Decision:
        return Decision(
            policy=self.name, verdict=Verdict.WARN, reason=reason, offer=offer, figures=figures
        )


def make_spot(config: Mapping[str, Any]) -> PlacementPolicy:
    return SpotPolicy(config)
