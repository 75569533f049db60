"""The cheaper policy: move a running job to an offer that costs less than where it runs.

Only offers cheaper than the current machine are used, cheapest first, and only those the shared
rules keep: a spot offer whose notice cannot save the job's state is never "cheaper", because
its saving would be paid for with the work a reclaim loses. Without a current machine (a job not
placed yet) every kept offer is used, cheapest first.

Watching a running job (:meth:`CheaperPolicy.watch`, asked by the node at every check): the
cheapest kept offer that holds the job (memory for its state, the GPUs it runs on) and saves at
least ``cheaper.min_saving`` of the price (a fifth by default: a move costs a pause and a
restore, so a cent is not worth one) is provisioned ahead, and the job moves there once it is
ready. A job pinned by an exact ``--on`` stays; a ``--spot-only`` job is offered spot only, a
``--no-spot`` one on-demand only; a spot offer is taken only with a fifth of its notice's bound
to spare (:func:`~portal.policies.screen.room_on`: a job just under a tighter bound would soon be
moved off again); ``cheaper.move: false`` turns it off.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from portal.core.domain import Decision, Job, Offer
from portal.core.specs import PlacementContext, PlacementPolicy
from portal.policies import wording
from portal.policies.base import Policy, cheapest_first
from portal.policies.screen import Rule, Screened

__all__ = ["CheaperPolicy"]


class CheaperPolicy(Policy):
    name = "cheaper"

    def evaluate(
        self, job: Job, offers: Sequence[Offer], context: PlacementContext
    ) -> list[Decision]:
        screen, options = self.screen(job, context)
        current = options.current
        kept: list[Screened] = []
        dropped: list[Screened] = []
        for offer in offers:
            screened = screen.one(offer)
            if screened.kept and current is not None:
                if offer.pool == current.pool:
                    screened = screen.drop(screened, wording.runs_there(), Rule.PRICE)
                elif offer.price_per_hour >= current.price_per_hour:
                    screened = screen.drop(
                        screened, wording.not_cheaper(offer, current), Rule.PRICE
                    )
            (kept if screened.kept else dropped).append(screened)
        return self.assemble(
            [
                (
                    s,
                    wording.cheaper(s.offer, current, s.bound)
                    if current is not None
                    else self.plain_reason(s),
                )
                for s in cheapest_first(kept)
            ],
            dropped,
        )

    def watch(self, job: Job, offers: Sequence[Offer], context: PlacementContext) -> list[Decision]:
        """``provision`` then ``move`` to the cheapest machine that holds the job for at least
        ``cheaper.min_saving`` less (:class:`~portal.core.specs.RunningJobPolicy`); nothing when
        there is none, the job is pinned, or the setting is off."""
        screen, options = self.screen(job, context)
        current, measure = options.current, screen.measure
        if current is None or measure is None or not options.cheaper_move:
            return []
        if options.pinned(current):
            return []  # the user chose this machine
        most = current.price_per_hour * (1.0 - options.min_saving)

        def wanted(offer: Offer) -> bool:
            if offer.pool == current.pool or offer.price_per_hour > most:
                return False
            if offer.capacity.interruptible:
                return not options.no_spot
            return not options.spot_only

        best = self.cheapest_holding(job, offers, screen, options, wanted)
        if best is None:
            return []
        return self.provision_then_move(
            best.offer,
            current,
            provision=wording.cheaper_provision(best.offer, current, best.bound),
            move=wording.cheaper_move(best.offer, current, best.bound),
            figures={
                **best.figures,
                "saving_per_hour": current.price_per_hour - best.offer.price_per_hour,
            },
        )


def make_cheaper(config: Mapping[str, Any]) -> PlacementPolicy:
    return CheaperPolicy(config)
