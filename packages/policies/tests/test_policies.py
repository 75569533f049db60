from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from policies_factories import (
    A2_1G,
    C7I_LARGE,
    G6_XL,
    GB,
    M7I_2XL,
    N2_4,
    R7I_4XL,
    bounds,
    checkpoint,
    job,
    mixed_offers,
    on_demand,
    resident,
    spot,
)

from portal.core.domain import Decision, Offer, Verdict
from portal.core.errors import InvalidSettingError
from portal.core.specs import PlacementContext, PlacementPolicy, RunningJobPolicy, StateMeasure
from portal.policies import CheaperPolicy, ReturnPolicy, SpotPolicy
from portal.policies.rates import StorageRoute
from portal.testing import PlacementPolicyContract

# --- the contract, for every policy --------------------------------------------------------------


class TestSpotContract(PlacementPolicyContract):
    def make_policy(self) -> PlacementPolicy:
        return SpotPolicy({"bounds": bounds()})


class TestCheaperContract(PlacementPolicyContract):
    def make_policy(self) -> PlacementPolicy:
        return CheaperPolicy({"bounds": bounds()})


class TestReturnContract(PlacementPolicyContract):
    def make_policy(self) -> PlacementPolicy:
        return ReturnPolicy({"bounds": bounds()})


# --- helpers -------------------------------------------------------------------------------------


def ctx(state: StateMeasure | None = None, **settings: Any) -> PlacementContext:
    renamed: Mapping[str, Any] = {k.replace("__", "."): v for k, v in settings.items()}
    return PlacementContext(state=state, settings=renamed)


def used(decisions: list[Decision]) -> list[Offer]:
    return [d.offer for d in decisions if d.verdict is Verdict.USE and d.offer is not None]


def by_verdict(decisions: list[Decision], verdict: Verdict) -> list[Decision]:
    return [d for d in decisions if d.verdict is verdict]


# --- spot: placing -------------------------------------------------------------------------------


def test_spot_prefers_spot_cheapest_first_then_on_demand() -> None:
    decisions = SpotPolicy({"bounds": bounds()}).evaluate(job(), mixed_offers(), ctx())
    offers = used(decisions)
    spot_part = [o for o in offers if o.capacity.interruptible]
    assert offers[: len(spot_part)] == spot_part
    assert [o.price_per_hour for o in spot_part] == sorted(o.price_per_hour for o in spot_part)
    assert len(offers) == len(mixed_offers())


def test_spot_leaves_out_offers_whose_notice_cannot_save_the_checkpoint() -> None:
    decisions = SpotPolicy({"bounds": bounds()}).evaluate(
        job(), mixed_offers(), ctx(checkpoint(12 * GB))
    )
    skipped = {d.offer.describe() for d in by_verdict(decisions, Verdict.SKIP) if d.offer}
    # small aws (7.9 GB), L4 g6.xlarge (small, 7.9 GB), gcp n2-standard-4 (30 s: 1.5 GB)
    assert skipped == {
        "spot aws c7i.large (us-east-1)",
        "spot aws g6.xlarge (us-east-1)",
        "spot gcp n2-standard-4 (us-central1)",
    }
    skip = next(d for d in decisions if d.verdict is Verdict.SKIP)
    assert skip.figures["rule"] == "state_bound"
    assert skip.figures["figure"] == "its checkpoint as stored"
    assert skip.figures["bound_bytes"] < skip.figures["state_bytes"]


def test_a_new_job_asking_for_more_is_placed_on_spot_with_a_warning() -> None:
    decisions = SpotPolicy({"bounds": bounds()}).evaluate(
        job(state_gib=12), [spot(C7I_LARGE), on_demand(C7I_LARGE)], ctx()
    )
    assert [d.verdict for d in decisions] == [Verdict.USE, Verdict.WARN, Verdict.USE]
    assert decisions[1].reason == (
        "spot aws c7i.large (us-east-1) used with a warning: this job's state (12.9 GB, what it "
        "asked for) exceeds what its 120 s notice can save (about 7.9 GB); a new job's "
        "--state-gib is a guess, so its measured state will decide once Portal has one"
    )


def test_resident_memory_is_acted_on_only_a_quarter_over() -> None:
    policy = SpotPolicy({"bounds": bounds()})
    offers = [spot(C7I_LARGE)]
    near = policy.evaluate(job(), offers, ctx(resident(9 * GB)))  # over 7.9, under 9.84
    assert [d.verdict for d in near] == [Verdict.USE, Verdict.WARN]
    assert "its resident and GPU memory now" in near[1].reason
    far = policy.evaluate(job(), offers, ctx(resident(10 * GB)))
    assert [d.verdict for d in far] == [Verdict.SKIP]


# --- spot: move when over ------------------------------------------------------------------------


def test_move_when_over_provisions_the_cheapest_fitting_on_demand_then_moves() -> None:
    current = spot(C7I_LARGE)
    offers = [
        current,
        on_demand(C7I_LARGE, price=0.09),  # 4 GiB: too small for 12 GB
        on_demand(R7I_4XL, price=1.06),
        on_demand(M7I_2XL, price=0.40),
        spot(M7I_2XL, price=0.10),
    ]
    decisions = SpotPolicy({"bounds": bounds()}).evaluate(
        job(), offers, ctx(checkpoint(12 * GB), current_offer=current)
    )
    provision, move = decisions[0], decisions[1]
    assert (provision.verdict, move.verdict) == (Verdict.PROVISION, Verdict.MOVE)
    assert provision.offer == move.offer == offers[3]
    assert provision.reason == (
        "provision on-demand aws m7i.2xlarge (us-east-1) ahead: this job's state (12.0 GB, its "
        "checkpoint as stored) exceeds what the 120 s notice of spot aws c7i.large (us-east-1) "
        "can save (about 7.9 GB); the job moves there once it is ready"
    )
    assert move.reason.startswith("move to on-demand aws m7i.2xlarge (us-east-1) once it is ready")
    assert move.figures["when"] == "ready" and move.figures["to_pool"] == offers[3].pool


def test_move_when_over_is_re_measured_at_every_check() -> None:
    current = spot(C7I_LARGE)
    offers = [current, on_demand(M7I_2XL)]
    policy = SpotPolicy({"bounds": bounds()})
    small = policy.evaluate(job(), offers, ctx(checkpoint(5 * GB), current_offer=current))
    assert not by_verdict(small, Verdict.MOVE)
    grown = policy.evaluate(job(), offers, ctx(checkpoint(9 * GB), current_offer=current))
    assert [d.verdict for d in grown[:2]] == [Verdict.PROVISION, Verdict.MOVE]


def test_move_when_over_keeps_the_gpu() -> None:
    current = spot(G6_XL)
    offers = [current, on_demand(R7I_4XL, price=0.5), on_demand(G6_XL, price=0.8)]
    decisions = SpotPolicy({"bounds": bounds()}).evaluate(
        job(), offers, ctx(checkpoint(10 * GB), current_offer=current)
    )
    assert decisions[0].verdict is Verdict.PROVISION and decisions[0].offer == offers[2]


def test_move_when_over_never_provisions_in_an_excluded_pool() -> None:
    current = spot(C7I_LARGE)
    cheap, dear = on_demand(M7I_2XL, price=0.4), on_demand(R7I_4XL, price=1.0)
    context = PlacementContext(
        state=checkpoint(12 * GB),
        excluded_pools=frozenset({cheap.pool}),
        settings={"current_offer": current},
    )
    decisions = SpotPolicy({"bounds": bounds()}).evaluate(job(), [current, cheap, dear], context)
    assert decisions[0].offer == dear


def test_move_when_over_off_warns_and_stays() -> None:
    current = spot(C7I_LARGE)
    decisions = SpotPolicy({"bounds": bounds()}).evaluate(
        job(),
        [current, on_demand(M7I_2XL)],
        ctx(checkpoint(12 * GB), current_offer=current, spot__move_when_over="false"),
    )
    assert not by_verdict(decisions, Verdict.PROVISION)
    assert decisions[0].verdict is Verdict.WARN
    assert decisions[0].reason == (
        "spot aws c7i.large (us-east-1) kept: this job's state (12.0 GB, its checkpoint as "
        "stored) exceeds what its 120 s notice can save (about 7.9 GB), and "
        "spot.move_when_over is false; if it is reclaimed, the work since its last checkpoint "
        "may be lost"
    )


def test_a_job_pinned_to_an_exact_spot_machine_is_warned_and_left() -> None:
    current = spot(C7I_LARGE)
    decisions = SpotPolicy({"bounds": bounds()}).evaluate(
        job(),
        [current, on_demand(M7I_2XL)],
        ctx(checkpoint(12 * GB), current_offer=current, on="spot:aws:c7i.large"),
    )
    assert not by_verdict(decisions, Verdict.MOVE)
    assert decisions[0].verdict is Verdict.WARN
    assert decisions[0].reason.startswith(
        "spot aws c7i.large (us-east-1) kept because --on spot:aws:c7i.large pins the job to it: "
        "this job's state (12.0 GB, its checkpoint as stored) exceeds"
    )


def test_no_on_demand_that_fits_is_a_warning_not_a_move() -> None:
    current = spot(C7I_LARGE)
    decisions = SpotPolicy({"bounds": bounds()}).evaluate(
        job(), [current, on_demand(C7I_LARGE)], ctx(checkpoint(12 * GB), current_offer=current)
    )
    assert decisions[0].verdict is Verdict.WARN and "no on-demand offer fits" in decisions[0].reason


def test_a_spot_only_job_is_warned_and_left_where_a_move_would_take_it_off_spot() -> None:
    current = spot(C7I_LARGE)
    decisions = SpotPolicy({"bounds": bounds()}).watch(
        job(),
        [current, on_demand(M7I_2XL)],
        ctx(checkpoint(12 * GB), current_offer=current, spot_only=True),
    )
    assert [d.verdict for d in decisions] == [Verdict.WARN]
    assert decisions[0].reason.startswith(
        "spot aws c7i.large (us-east-1) kept because the job runs on spot only: this job's "
        "state (12.0 GB, its checkpoint as stored) exceeds"
    )
    with pytest.raises(InvalidSettingError, match="spot_only has value 'sometimes'"):
        SpotPolicy({"bounds": bounds()}).watch(
            job(), [current], ctx(checkpoint(12 * GB), current_offer=current, spot_only="sometimes")
        )


def test_the_spot_policy_watches_running_jobs_through_the_capability_protocol() -> None:
    """The node asks a policy it looked up by name; ``watch`` is what it calls, and it is
    move-when-over alone (no per-offer ranking)."""
    policy = SpotPolicy({"bounds": bounds()})
    assert isinstance(policy, RunningJobPolicy)
    current = spot(C7I_LARGE)
    decisions = policy.watch(
        job(), [current, on_demand(M7I_2XL)], ctx(checkpoint(12 * GB), current_offer=current)
    )
    assert [d.verdict for d in decisions] == [Verdict.PROVISION, Verdict.MOVE]
    assert policy.watch(job(), [current], ctx(checkpoint(1 * GB), current_offer=current)) == []
    # The cheaper and return policies watch running jobs too (below).
    assert isinstance(CheaperPolicy({"bounds": bounds()}), RunningJobPolicy)
    assert isinstance(ReturnPolicy({"bounds": bounds()}), RunningJobPolicy)


def test_what_a_running_job_asked_for_never_moves_it() -> None:
    current = spot(C7I_LARGE)
    decisions = SpotPolicy({"bounds": bounds()}).evaluate(
        job(state_gib=64), [current, on_demand(R7I_4XL)], ctx(current_offer=current)
    )
    assert not by_verdict(decisions, Verdict.PROVISION)


def test_bad_settings_are_refused_with_the_setting_named() -> None:
    policy = SpotPolicy({"bounds": bounds()})
    with pytest.raises(InvalidSettingError, match=r"spot\.move_when_over has value 'maybe'"):
        policy.evaluate(job(), [], ctx(spot__move_when_over="maybe"))
    with pytest.raises(InvalidSettingError, match="current_offer"):
        policy.evaluate(job(), [], ctx(current_offer="aws c7i.large"))
    with pytest.raises(InvalidSettingError, match=r"storage\.route"):
        policy.evaluate(job(), [], ctx(storage__route="moon"))


def test_storage_route_follows_the_store() -> None:
    policy = SpotPolicy({"bounds": bounds()})
    offer = spot(C7I_LARGE)
    same = policy.evaluate(job(), [offer], ctx(checkpoint(1 * GB)))[0].figures
    cross = policy.evaluate(job(), [offer], ctx(checkpoint(1 * GB), storage__region="eu-west-1"))[
        0
    ].figures
    local = policy.evaluate(
        job(), [offer], ctx(checkpoint(1 * GB), storage_url="file:///tmp/store")
    )[0].figures
    assert (same["route"], cross["route"], local["route"]) == (
        "same_region",
        "cross_region",
        "local_disk",
    )


# --- cheaper ----------------------------------------------------------------------------------------


def test_cheaper_uses_only_cheaper_offers_that_can_save_the_state() -> None:
    current = on_demand(M7I_2XL, price=0.40)
    offers = [
        current,
        spot(C7I_LARGE, price=0.03),
        spot(M7I_2XL, price=0.14),
        on_demand(R7I_4XL, price=1.06),
        spot(N2_4, region="us-central1", price=0.06),
    ]
    decisions = CheaperPolicy({"bounds": bounds()}).evaluate(
        job(), offers, ctx(checkpoint(12 * GB), current_offer=current)
    )
    assert used(decisions) == [offers[2]]
    reasons = {d.offer.describe(): d.reason for d in decisions if d.offer}
    assert reasons["spot aws m7i.2xlarge (us-east-1)"].startswith(
        "spot aws m7i.2xlarge (us-east-1) is cheaper: $0.1400/h instead of $0.4000/h"
    )
    assert "exceeds what its 120 s notice can save" in reasons["spot aws c7i.large (us-east-1)"]
    assert "not less than" in reasons["on-demand aws r7i.4xlarge (us-east-1)"]
    assert reasons["on-demand aws m7i.2xlarge (us-east-1)"].endswith("the job runs there now")


def test_cheaper_without_a_current_machine_ranks_by_price() -> None:
    decisions = CheaperPolicy({"bounds": bounds()}).evaluate(job(), mixed_offers(), ctx())
    prices = [o.price_per_hour for o in used(decisions)]
    assert prices == sorted(prices) and len(prices) == len(mixed_offers())


# --- return --------------------------------------------------------------------------------------


def test_return_brings_a_job_back_to_spot_that_can_save_it() -> None:
    current = on_demand(M7I_2XL, price=0.40)
    offers = [
        current,
        spot(C7I_LARGE, price=0.03),
        spot(M7I_2XL, price=0.14),
        spot(A2_1G, region="us-central1", price=1.2),
    ]
    decisions = ReturnPolicy({"bounds": bounds()}).evaluate(
        job(), offers, ctx(checkpoint(12 * GB), current_offer=current)
    )
    assert used(decisions) == [offers[2]]
    assert decisions[0].reason.startswith(
        "spot aws m7i.2xlarge (us-east-1) can take the job back to spot from on-demand aws "
        "m7i.2xlarge (us-east-1) at $0.1400/h: its 120 s notice can save about 21.0 GB"
    )


def test_return_has_nothing_to_do_for_a_job_on_spot() -> None:
    current = spot(M7I_2XL)
    decisions = ReturnPolicy({"bounds": bounds()}).evaluate(
        job(), mixed_offers(), ctx(current_offer=current)
    )
    assert not used(decisions)
    assert all("already runs on spot" in d.reason for d in decisions)


def test_factories_through_the_hook_build_working_policies() -> None:
    from portal.policies import plugin

    specs = {s.name: s for s in plugin.portal_placement_policies()}
    assert set(specs) == {"spot", "cheaper", "return"}
    for name, spec in specs.items():
        policy = spec.factory({"bounds": bounds()})
        assert policy.name == name
        assert policy.evaluate(job(), mixed_offers(), ctx())


# --- cheaper and return, watching a running job --------------------------------------------------


def _moves(decisions: list[Decision]) -> tuple[str, Offer] | None:
    """(policy, target) of a provision-then-move answer, or None for no move."""
    if not decisions:
        return None
    assert [d.verdict for d in decisions] == [Verdict.PROVISION, Verdict.MOVE]
    assert decisions[0].offer == decisions[1].offer and decisions[0].offer is not None
    return decisions[0].policy, decisions[0].offer


def _bound(offer: Offer) -> int:
    found = bounds().of(offer, StorageRoute.SAME_REGION)
    assert found is not None
    return found.bytes


def test_a_running_job_moves_to_the_cheapest_machine_that_holds_it() -> None:
    current = on_demand(R7I_4XL, price=1.06)
    offers = mixed_offers()
    decisions = CheaperPolicy({"bounds": bounds()}).watch(
        job(), offers, ctx(checkpoint(3 * GB), current_offer=current)
    )
    moved = _moves(decisions)
    assert moved == ("cheaper", spot(C7I_LARGE, price=0.03))
    assert decisions[0].reason.startswith(
        "provision spot aws c7i.large (us-east-1) ahead: it costs $0.0300/h instead of the "
        "$1.0600/h of on-demand aws r7i.4xlarge (us-east-1) and holds the job, and its 120 s "
        "notice can save about 7.9 GB"
    ), decisions[0].reason
    assert decisions[0].reason.endswith("(cheaper.move: false turns this off)")
    assert decisions[0].figures["from_pool"] == current.pool
    # 12 GB: c7i.large holds 4 GiB, and no spot notice that small saves it; m7i.2xlarge does.
    bigger = _moves(
        CheaperPolicy({"bounds": bounds()}).watch(
            job(), offers, ctx(checkpoint(12 * GB), current_offer=current)
        )
    )
    assert bigger is not None
    target = bigger[1]
    assert target.machine_type.memory_gib * 2**30 >= 12 * GB
    if target.capacity.interruptible:
        assert 0.8 * _bound(target) >= 12 * GB


def test_a_saving_too_small_for_a_move_is_no_move() -> None:
    current = on_demand(M7I_2XL, price=0.40)
    nearly = on_demand(M7I_2XL, region="us-west-2", price=0.35)  # 12.5% less
    policy = CheaperPolicy({"bounds": bounds()})
    assert (
        policy.watch(job(), [current, nearly], ctx(checkpoint(3 * GB), current_offer=current)) == []
    )
    settings = {"current_offer": current, "cheaper.min_saving": 0.1}
    assert _moves(
        policy.watch(
            job(), [current, nearly], PlacementContext(state=checkpoint(3 * GB), settings=settings)
        )
    ) == ("cheaper", nearly)
    with pytest.raises(InvalidSettingError, match=r"cheaper\.min_saving"):
        policy.watch(
            job(),
            [current],
            PlacementContext(
                state=checkpoint(GB), settings={**settings, "cheaper.min_saving": 1.5}
            ),
        )


def test_cheaper_keeps_to_what_the_job_was_placed_with() -> None:
    policy = CheaperPolicy({"bounds": bounds()})
    offers = mixed_offers()
    current = on_demand(R7I_4XL, price=1.06)
    no_spot = _moves(
        policy.watch(job(), offers, ctx(checkpoint(3 * GB), current_offer=current, no_spot=True))
    )
    assert no_spot == ("cheaper", on_demand(C7I_LARGE, price=0.09))
    on_spot = spot(R7I_4XL, price=0.37)
    only = _moves(
        policy.watch(job(), offers, ctx(checkpoint(3 * GB), current_offer=on_spot, spot_only=True))
    )
    assert only is not None and only[1].capacity.interruptible
    pinned = ctx(
        checkpoint(3 * GB), current_offer=current, on="on_demand:aws:r7i.4xlarge:us-east-1"
    )
    assert policy.watch(job(), offers, pinned) == []
    off = ctx(checkpoint(3 * GB), current_offer=current, cheaper__move=False)
    assert policy.watch(job(), offers, off) == []


def test_a_job_that_left_spot_returns_once_a_notice_saves_it_with_room() -> None:
    current = on_demand(M7I_2XL, price=0.40)
    policy = ReturnPolicy({"bounds": bounds()})
    offers = [current, spot(C7I_LARGE, price=0.03), on_demand(C7I_LARGE, price=0.09)]
    decisions = policy.watch(job(), offers, ctx(checkpoint(3 * GB), current_offer=current))
    assert _moves(decisions) == ("return", spot(C7I_LARGE, price=0.03))
    assert "can take the job back to spot from on-demand aws m7i.2xlarge" in decisions[0].reason, (
        decisions[0].reason
    )
    assert "return.move: false turns this off" in decisions[0].reason


def test_a_job_near_the_bound_does_not_return() -> None:
    """Between four fifths of the bound and the bound: spot could save it, but a little growth
    would move it off again, so it stays."""
    current = on_demand(R7I_4XL, price=1.06)
    target = spot(M7I_2XL, price=0.14)
    bound = _bound(target)
    policy = ReturnPolicy({"bounds": bounds()})
    near = ctx(checkpoint(0.9 * bound), current_offer=current)
    assert policy.watch(job(), [current, target], near) == []
    room = ctx(checkpoint(0.7 * bound), current_offer=current)
    assert _moves(policy.watch(job(), [current, target], room)) == ("return", target)
    # cheaper keeps the same room when it would take an on-demand job onto spot
    assert CheaperPolicy({"bounds": bounds()}).watch(job(), [current, target], near) == []


def test_return_leaves_what_the_user_chose() -> None:
    policy = ReturnPolicy({"bounds": bounds()})
    current = on_demand(M7I_2XL, price=0.40)
    offers = [current, spot(C7I_LARGE, price=0.03)]
    for settings in (
        {"no_spot": True},
        {"return__move": False},
        {"on": "on_demand:aws:m7i.2xlarge:us-east-1"},
    ):
        assert (
            policy.watch(job(), offers, ctx(checkpoint(GB), current_offer=current, **settings))
            == []
        )
    on_spot = spot(M7I_2XL, price=0.14)
    assert policy.watch(job(), offers, ctx(checkpoint(GB), current_offer=on_spot)) == []


def test_a_move_never_takes_a_job_below_the_memory_it_asked_for() -> None:
    """--memory is the machine's RAM: a cheaper machine with less is never chosen."""
    current = on_demand(R7I_4XL, price=1.06)
    asked = job(memory_gib=32)
    moved = _moves(
        CheaperPolicy({"bounds": bounds()}).watch(
            asked, mixed_offers(), ctx(checkpoint(3 * GB), current_offer=current)
        )
    )
    assert moved is not None and moved[1].machine_type.memory_gib >= 32


def test_cheaper_takes_a_spot_offer_only_with_room_to_spare() -> None:
    """Spot to a cheaper spot machine whose notice only just saves the state: the job would be
    moved off it at its first growth, so it stays; with room, it goes."""
    current = spot(R7I_4XL, price=0.37)
    target = spot(M7I_2XL, price=0.14)
    bound = _bound(target)
    assert 0.9 * bound <= M7I_2XL.memory_gib * 2**30  # it would hold the state: room decides
    policy = CheaperPolicy({"bounds": bounds()})
    tight = ctx(checkpoint(0.9 * bound), current_offer=current)
    assert policy.watch(job(), [current, target], tight) == []
    roomy = ctx(checkpoint(0.5 * bound), current_offer=current)
    assert _moves(policy.watch(job(), [current, target], roomy)) == ("cheaper", target)
