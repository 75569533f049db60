from __future__ import annotations

import pytest
from policies_factories import (
    A2_1G,
    C7I_LARGE,
    G6_XL,
    GB,
    M7I_2XL,
    N2_4,
    bounds,
    checkpoint,
    job,
    mixed_offers,
    on_demand,
    spot,
)

from portal.core.errors import InvalidArgumentError
from portal.core.specs import PlacementContext
from portal.policies import OnSpec, PlacementRequest, Planner, PoolExclusions
from portal.testing import FakeClock


def plan_for(state_gb: float, request: PlacementRequest, offers=None, exclusions=None):  # type: ignore[no-untyped-def]
    return Planner(bounds(), exclusions).plan(
        job(), offers or mixed_offers(), PlacementContext(state=checkpoint(state_gb * GB)), request
    )


def test_plan_lines_are_numbered_d1_to_d8() -> None:
    plan = plan_for(12, PlacementRequest.from_flags("resume", gpu="L4"))
    heads = [line.split(" ")[0] for line in plan.lines if not line.startswith("   ")]
    assert heads == ["D1", "D2", "D3", "D4", "D5", "D6", "D7", "D8"]
    assert plan.lines[0] == "D1 request: resume job-1 --gpu L4"
    assert plan.lines[1] == (
        "D2 state: 12.0 GB, its checkpoint as stored (with a tenth added for growth since)"
    )
    assert plan.lines[2] == "D3 offers considered: 10 (5 spot, 5 not spot)"
    assert plan.lines[3] == "D4 filters: 8 of 10 left out (--gpu L4: 8)"
    # the L4 spot offer is small: its 120 s notice saves about 7.9 GB, so on-demand is chosen
    assert plan.chosen == on_demand(G6_XL, price=0.80)
    assert (
        plan.lines[-1]
        == "D8 choice: on-demand aws g6.xlarge (us-east-1) at $0.8000/h; not reclaimed, no notice"
    )
    assert plan.notice_s is None


def test_the_chosen_spot_offer_carries_its_notice_field() -> None:
    plan = plan_for(1, PlacementRequest())
    assert plan.chosen == spot(C7I_LARGE, price=0.03)
    assert plan.notice_s == 120 and plan.bound is not None
    assert plan.lines[-1] == (
        "D8 choice: spot aws c7i.large (us-east-1) at $0.0300/h; notice 120 s, can save about "
        "7.9 GB"
    )
    d7 = plan.lines.index("D7 candidates, cheapest first: 10")
    assert plan.lines[d7 + 1].startswith(
        "   spot aws c7i.large (us-east-1) at $0.0300/h: its 120 s notice can save about 7.9 GB "
        "(150 MB/s (estimate) to the same-region object store, 15 s to start, halved; small "
        "class, 2 vCPUs from the catalog)"
    )


def test_an_exact_on_is_kept_with_the_warning() -> None:
    plan = plan_for(12, PlacementRequest.from_flags("resume", on="spot:aws:c7i.large"))
    assert plan.chosen == spot(C7I_LARGE, price=0.03)
    assert plan.warnings == [
        "spot aws c7i.large (us-east-1) kept because --on spot:aws:c7i.large names it: this job's "
        "state (12.0 GB, its checkpoint as stored) exceeds what its 120 s notice can save (about "
        "7.9 GB); if it is reclaimed, the work since its last checkpoint may be lost"
    ]
    assert "   warning: " + plan.warnings[0] in plan.lines
    assert "D6 spot offers left out for the state bound: none" in plan.lines


def test_an_on_that_is_not_exact_is_only_a_filter() -> None:
    plan = plan_for(12, PlacementRequest.from_flags("resume", on="aws:c7i.large"))
    assert plan.chosen == on_demand(C7I_LARGE, price=0.09)


def test_no_spot_leaves_out_spot() -> None:
    plan = plan_for(1, PlacementRequest.from_flags("move", no_spot=True))
    assert plan.chosen is not None and not plan.chosen.capacity.interruptible
    assert plan.lines[0] == "D1 request: move job-1 --no-spot"
    assert plan.lines[3] == "D4 filters: 5 of 10 left out (--no-spot: 5)"


def test_a_spot_only_job_with_no_spot_that_can_save_it_stays_suspended() -> None:
    offers = [spot(C7I_LARGE), spot(N2_4, region="us-central1"), on_demand(M7I_2XL)]
    plan = plan_for(12, PlacementRequest.from_flags("resume", spot_only=True), offers)
    assert plan.chosen is None
    assert plan.outcome == (
        "job job-1 stays suspended: no spot offer can save this job's state (12.0 GB, its "
        "checkpoint as stored); resume it on an exact machine (portal resume job-1 --on SPEC) or "
        "on-demand (portal resume job-1 --no-spot)"
    )
    assert plan.lines[-1] == "D8 choice: none: " + plan.outcome
    events = plan.events(at=5.0)
    assert events[-1].kind == "placement.none" and events[-1].message == plan.outcome
    assert sum(e.kind == "placement.skipped" for e in events) == 2


def test_a_move_with_nothing_left_stays_where_it_is() -> None:
    plan = plan_for(
        1,
        PlacementRequest.from_flags("move", gpu="A100"),
        [on_demand(M7I_2XL), spot(A2_1G, "r1")],
        exclusions=None,
    )
    assert plan.chosen == spot(A2_1G, "r1")
    excl = PoolExclusions(FakeClock())
    excl.reclaimed(spot(A2_1G, "r1"))
    plan = plan_for(
        1,
        PlacementRequest.from_flags("move", gpu="A100"),
        [on_demand(M7I_2XL), spot(A2_1G, "r1")],
        exclusions=excl,
    )
    assert plan.chosen is None
    assert plan.outcome.startswith("job job-1 stays where it is: no offer is left")


def test_a_reclaimed_pool_is_listed_under_d5_with_when_it_is_back() -> None:
    clock = FakeClock(start=1_700_000_000.0)  # 22:13:20 UTC
    excl = PoolExclusions(clock)
    excl.reclaimed(spot(C7I_LARGE, price=0.03))
    plan = plan_for(1, PlacementRequest(), exclusions=excl)
    d5 = plan.lines.index("D5 pools left out after a reclaim: 1")
    assert plan.lines[d5 + 1] == (
        "   would not use spot aws c7i.large (us-east-1): its pool reclaimed a machine, so it is "
        "left out of new placements until 22:43:20 UTC"
    )
    assert plan.chosen != spot(C7I_LARGE, price=0.03)
    clock.advance(1800)
    assert plan_for(1, PlacementRequest(), exclusions=excl).chosen == spot(C7I_LARGE, price=0.03)


def test_a_state_that_is_not_measured_is_said_so() -> None:
    plan = Planner(bounds()).plan(job(), mixed_offers(), PlacementContext())
    assert plan.lines[1].startswith("D2 state: not measured, and no --state-gib guess")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"gpu": "Z100"}, "--gpu 'Z100' is not a GPU model .* known models: A100 40GB, L4"),
        ({"on": "spot:aws:c7i.huge"}, "--on 'spot:aws:c7i.huge' matches no offer now; offered"),
        ({"on": "spot::c7i.large"}, "is not a machine spec: write"),
        ({"on": "a:b:c:d:e"}, "is not a machine spec"),
        ({"gpu": " "}, "--gpu needs a GPU model"),
        ({"no_spot": True, "spot_only": True}, "contradict each other"),
    ],
)
def test_bad_flags_are_clear_errors(flags: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        request = PlacementRequest.from_flags("resume", **flags)  # type: ignore[arg-type]
        Planner(bounds()).plan(job(), mixed_offers(), PlacementContext(), request)


def test_gpu_names_match_word_by_word() -> None:
    plan = plan_for(
        1,
        PlacementRequest.from_flags("resume", gpu="a100"),
        [spot(A2_1G, "us-central1"), on_demand(A2_1G, "us-central1")],
    )
    assert plan.chosen is not None and plan.chosen.machine_type == A2_1G


def test_on_spec_forms() -> None:
    spec = OnSpec.parse("spot:aws:c7i.large:us-east-1")
    assert spec.exact and spec.matches(spot(C7I_LARGE))
    assert not spec.matches(on_demand(C7I_LARGE))
    assert OnSpec.parse("c7i.large").matches(on_demand(C7I_LARGE))
    assert not OnSpec.parse("aws:c7i.large").exact
    assert OnSpec.parse(spot(C7I_LARGE).pool).matches(spot(C7I_LARGE))  # a pool pastes back


def test_a_machine_with_less_memory_than_the_job_asks_for_is_never_chosen() -> None:
    """``--memory 16``: the 4 GiB c7i.large (the cheapest) is left out by D4, named; the
    16 GiB n2-standard-4 and larger remain."""
    plan = Planner(bounds()).plan(job(memory_gib=16), mixed_offers(), PlacementContext())
    d4 = next(line for line in plan.lines if line.startswith("D4 "))
    assert "--memory 16:" in d4, d4
    assert plan.chosen is not None and plan.chosen.machine_type.memory_gib >= 16
    skipped = [d for d in plan.decisions if d.figures.get("rule") == "memory"]
    assert skipped and all(d.offer.machine_type.memory_gib < 16 for d in skipped)  # type: ignore[union-attr]
    assert "less than the 16 GiB the job asks for (--memory)" in skipped[0].reason
