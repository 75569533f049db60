"""The sentences the spec fixes, word for word."""

from __future__ import annotations

from policies_factories import C7I_LARGE, GB, bounds, checkpoint, job, on_demand, spot

from portal.core.specs import PlacementContext
from portal.policies import PlacementRequest, Planner, StorageRoute, wording

EVENT = (
    "spot aws c7i.large (us-east-1) skipped: this job's state (12.0 GB, its checkpoint as "
    "stored) exceeds what its 120 s notice can save (about 7.9 GB)"
)
PLAN_LINE = (
    "would not use spot aws c7i.large (us-east-1): this job's state (12.0 GB, its checkpoint as "
    "stored) exceeds what its 120 s notice can save (about 7.9 GB)"
)


def test_the_event_line() -> None:
    offer = spot(C7I_LARGE)
    bound = bounds().of(offer, StorageRoute.SAME_REGION)
    assert bound is not None
    measure = checkpoint(12 * GB)
    assert wording.skipped(offer, wording.over_bound(measure, bound)) == EVENT
    assert wording.would_not_use(offer, wording.over_bound(measure, bound)) == PLAN_LINE


def test_the_plan_says_it_under_d6_and_the_event_log_gets_the_event() -> None:
    offers = [spot(C7I_LARGE), on_demand(C7I_LARGE)]
    plan = Planner(bounds()).plan(
        job(), offers, PlacementContext(state=checkpoint(12 * GB)), PlacementRequest()
    )
    lines = list(plan.lines)
    d6 = next(i for i, line in enumerate(lines) if line.startswith("D6 "))
    assert lines[d6] == "D6 spot offers left out for the state bound: 1"
    assert lines[d6 + 1] == "   " + PLAN_LINE
    assert [e.message for e in plan.events(at=1.0) if e.kind == "placement.skipped"] == [EVENT]


def test_notices_and_prices() -> None:
    assert wording.notice(120.0) == "120 s" and wording.notice(25.5) == "25.5 s"
    assert wording.price(0.0893) == "$0.0893/h"


def test_resident_memory_skip_says_why_it_waited_for_a_quarter() -> None:
    offer = spot(C7I_LARGE)
    bound = bounds().of(offer, StorageRoute.SAME_REGION)
    assert bound is not None
    from policies_factories import resident

    text = wording.skipped(offer, wording.over_bound(resident(12 * GB), bound))
    assert text == (
        "spot aws c7i.large (us-east-1) skipped: this job's state (12.0 GB, its resident and GPU "
        "memory now) exceeds what its 120 s notice can save (about 7.9 GB); memory overstates a "
        "checkpoint, so Portal acts on it alone only a quarter over (about 9.8 GB)"
    )
