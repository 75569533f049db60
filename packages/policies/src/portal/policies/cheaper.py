"""The cheaper policy: move a running job to an offer that costs less than where it runs.

Only offers cheaper than the current machine are used, cheapest first, and only those the shared
rules keep: a spot offer whose notice cannot save the job's state is never "cheaper", because
its saving would be paid for with the work a reclaim loses. Without a current machine (a job not
placed yet) every kept offer is used, cheapest first.
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


def make_cheaper(config: Mapping[str, Any]) -> PlacementPolicy:
    return CheaperPolicy(config)
