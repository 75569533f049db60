"""Properties of plans over generated offers and measures."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from policies_factories import CATALOG, bounds, job

from portal.core.domain import CapacityClass, MachineType, Offer
from portal.core.specs import PlacementContext, StateMeasure
from portal.policies import Figure, PlacementRequest, Planner, StorageRoute

BOUNDS = bounds()
UNKNOWN = MachineType(provider="acme", name="x1", vcpus=7, memory_gib=7)

offers_st = st.lists(
    st.builds(
        lambda machine, region, spot, price, notice: Offer(
            machine_type=machine,
            region=region,
            capacity=CapacityClass.SPOT if spot else CapacityClass.ON_DEMAND,
            price_per_hour=price,
            notice_s=notice if spot else None,
        ),
        st.sampled_from((*CATALOG, UNKNOWN)),
        st.sampled_from(("r1", "r2")),
        st.booleans(),
        st.floats(min_value=0.0, max_value=50.0, allow_nan=False),
        st.sampled_from((0.0, 20.0, 30.0, 120.0, 600.0)),
    ),
    min_size=1,
    max_size=12,
)
measure_st = st.builds(
    StateMeasure,
    bytes=st.integers(min_value=0, max_value=300 * 10**9),
    figure=st.sampled_from([str(f) for f in Figure if f is not Figure.ASKED_FOR]),
)


@settings(max_examples=150, deadline=None)
@given(offers=offers_st, measure=measure_st, route=st.sampled_from(list(StorageRoute)))
def test_a_plan_never_picks_spot_whose_bound_is_below_the_measure(
    offers: list[Offer], measure: StateMeasure, route: StorageRoute
) -> None:
    context = PlacementContext(state=measure, settings={"storage.route": route})
    plan = Planner(BOUNDS).plan(job(), offers, context, PlacementRequest())
    if plan.chosen is not None and plan.chosen.capacity.interruptible:
        bound = BOUNDS.of(plan.chosen, route)
        assert bound is not None
        allowed = bound.bytes * (1.25 if measure.figure == Figure.RESIDENT_AND_GPU else 1.0)
        assert measure.bytes <= allowed
    # and the choice is the cheapest of the candidates
    if plan.chosen is not None:
        used = [d.offer for d in plan.decisions if d.verdict == "use" and d.offer]
        assert plan.chosen.price_per_hour == min(o.price_per_hour for o in used)


@settings(max_examples=100, deadline=None)
@given(offers=offers_st, measure=measure_st, pick=st.integers(min_value=0))
def test_only_an_exact_on_picks_spot_over_its_bound(
    offers: list[Offer], measure: StateMeasure, pick: int
) -> None:
    target = offers[pick % len(offers)]
    spec = f"{target.capacity.value.replace('_', '-')}:{target.provider}:{target.machine_type.name}:{target.region}"
    plan = Planner(BOUNDS).plan(
        job(), offers, PlacementContext(state=measure), PlacementRequest.from_flags(on=spec)
    )
    assert plan.chosen is not None  # pinned offers are always kept
    assert plan.chosen.machine_type == target.machine_type
    bound = BOUNDS.of(plan.chosen, StorageRoute.SAME_REGION)
    if bound is not None and measure.bytes > bound.bytes:
        assert any("kept because --on" in w for w in plan.warnings)


@settings(max_examples=60, deadline=None)
@given(offers=offers_st, measure=measure_st)
def test_every_offer_gets_a_decision_and_plans_are_deterministic(
    offers: list[Offer], measure: StateMeasure
) -> None:
    context = PlacementContext(state=measure)
    first = Planner(BOUNDS).plan(job(), offers, context)
    assert first == Planner(BOUNDS).plan(job(), offers, context)
    assert {id(d.offer) for d in first.decisions} >= {id(o) for o in offers}
