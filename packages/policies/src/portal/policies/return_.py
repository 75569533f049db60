"""The return policy: bring a job that left spot back to spot once spot can hold it again.

A job moved to on-demand because its state outgrew a notice, or placed on-demand while its pool
was left out after a reclaim, costs more than it needs to once a spot offer can save its state
again. This policy uses such spot offers, cheapest first, when they are cheaper than where the
job runs; on-demand offers are not what it looks for, and a job already on spot has nothing to
return from. (The module is ``return_`` because ``return`` is a keyword.)

Watching a running job (:meth:`ReturnPolicy.watch`, asked by the node at every check): a job on
on-demand goes back to the cheapest spot offer that holds it, once that offer's notice can save
its state with a fifth to spare (:func:`portal.policies.screen.room_on`: a job near the bound
would otherwise go back and forth between spot and on-demand), provisioned ahead and moved to once
ready. A job placed with ``--no-spot`` or pinned by an exact ``--on`` stays; ``return.move:
false`` turns it off.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from portal.core.domain import Decision, Job, Offer
from portal.core.specs import PlacementContext, PlacementPolicy
from portal.policies import wording
from portal.policies.base import Policy, cheapest_first
from portal.policies.screen import Rule, Screened

__all__ = ["ReturnPolicy"]


class ReturnPolicy(Policy):
    name = "return"

    def evaluate(
        self, job: Job, offers: Sequence[Offer], context: PlacementContext
    ) -> list[Decision]:
        screen, options = self.screen(job, context)
        current = options.current
        kept: list[Screened] = []
        dropped: list[Screened] = []
        for offer in offers:
            screened = screen.one(offer)
            if current is not None and current.capacity.interruptible:
                screened = screen.drop(screened, wording.already_on_spot(current), Rule.CAPACITY)
            elif screened.kept and not offer.capacity.interruptible:
                screened = screen.drop(screened, wording.not_spot_for_return(), Rule.CAPACITY)
            elif (
                screened.kept
                and current is not None
                and offer.price_per_hour >= current.price_per_hour
            ):
                screened = screen.drop(screened, wording.not_cheaper(offer, current), Rule.PRICE)
            (kept if screened.kept else dropped).append(screened)
        return self.assemble(
            [(s, wording.back_to_spot(s.offer, current, s.bound)) for s in cheapest_first(kept)],
            dropped,
        )

    def watch(self, job: Job, offers: Sequence[Offer], context: PlacementContext) -> list[Decision]:
        """``provision`` then ``move`` back to spot (:class:`~portal.core.specs.RunningJobPolicy`)
        when a cheaper spot offer holds the job and its notice saves the state with a fifth to
        spare; nothing otherwise."""
        screen, options = self.screen(job, context)
        current, measure = options.current, screen.measure
        if current is None or measure is None or not options.return_move:
            return []
        if current.capacity.interruptible or options.no_spot or options.pinned(current):
            return []  # on spot already, or on-demand by the user's choice

        def wanted(offer: Offer) -> bool:
            return offer.capacity.interruptible and offer.price_per_hour < current.price_per_hour

        best = self.cheapest_holding(job, offers, screen, options, wanted)
        if best is None:
            return []
        return self.provision_then_move(
            best.offer,
            current,
            provision=wording.return_provision(best.offer, current, best.bound),
            move=wording.return_move(best.offer, current, best.bound),
            figures=best.figures,
        )


def make_return(config: Mapping[str, Any]) -> PlacementPolicy:
    return ReturnPolicy(config)
