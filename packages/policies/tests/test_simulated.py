from __future__ import annotations

import pluggy
import pytest
from policies_factories import GB, checkpoint, job

from portal.core.errors import InvalidArgumentError
from portal.core.plugins import Plugins
from portal.core.specs import PlacementContext
from portal.policies import (
    Bounds,
    MachineClass,
    PlacementRequest,
    Planner,
    RateBook,
    SimulatedCloud,
    StorageRoute,
    plugin,
)


def test_offers_are_deterministic_and_cover_providers_and_capacity() -> None:
    cloud = SimulatedCloud.bundled()
    offers = cloud.offers()
    assert offers == SimulatedCloud.bundled().offers()
    assert {o.provider for o in offers} == {"aws", "gcp", "azure"}
    assert {o.capacity for o in offers} == {"spot", "on_demand"}
    for offer in offers:
        if offer.capacity.interruptible:
            assert offer.notice_s == {"aws": 120, "gcp": 30, "azure": 30}[offer.provider]
    assert len({o.pool for o in offers}) == len(offers)


def test_spot_costs_less_than_on_demand_in_the_same_pool() -> None:
    offers = SimulatedCloud.bundled().offers("us-east-1")
    prices = {(o.machine_type.name, o.capacity): o.price_per_hour for o in offers}
    for (name, capacity), price in prices.items():
        if capacity == "spot":
            assert price < prices[(name, "on_demand")]


def test_gpu_types_are_offered_only_where_listed() -> None:
    cloud = SimulatedCloud.bundled()
    assert {o.region for o in cloud.offers() if o.machine_type.name == "p4d.24xlarge"} == {
        "us-east-1",
        "us-west-2",
    }


def test_unknown_region_and_pool_are_clear_errors() -> None:
    cloud = SimulatedCloud.bundled()
    with pytest.raises(InvalidArgumentError, match="no region 'mars-1'; its regions: eastus"):
        cloud.offers("mars-1")
    with pytest.raises(InvalidArgumentError, match="no pool 'x'"):
        cloud.offer("x")
    offer = cloud.offers()[0]
    assert cloud.offer(offer.pool) == offer


def test_bad_data_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="simulated cloud data is not valid"):
        SimulatedCloud({"providers": {"aws": {"regions": {}}}})


def test_save_time_and_rates_stand_in_for_measurements() -> None:
    cloud = SimulatedCloud.bundled()
    offer = next(o for o in cloud.offers("us-east-1") if o.machine_type.name == "c7i.large")
    assert cloud.save_seconds(offer, 1_600_000_000, StorageRoute.SAME_REGION) == 12 + 10
    assert cloud.save_seconds(offer, 1, StorageRoute.CROSS_REGION) is None
    book = RateBook()
    cloud.record_rates(book)
    rate = book.rate("aws", MachineClass.SMALL, StorageRoute.SAME_REGION)
    assert rate.measured and rate.bytes_per_s == 160e6


def test_registered_as_a_catalog_and_usable_end_to_end(pm: pluggy.PluginManager) -> None:
    pm.register(plugin, name="policies")
    plugins = Plugins(pm)
    spec = plugins.catalogs()["simulated"]
    assert spec.offers is not None
    offers = list(spec.offers(None))
    assert {p.name for p in plugins.placement_policies().values()} == {"spot", "cheaper", "return"}
    bounds = Bounds.from_plugins(plugins)
    plan = Planner(bounds).plan(
        job(),
        offers,
        PlacementContext(state=checkpoint(12 * GB)),
        PlacementRequest.from_flags("resume", gpu="L4"),
    )
    assert plan.chosen is not None
    assert "sized as its default class" not in plan.render()
    assert any(line.startswith("   would not use spot gcp g2-standard-4") for line in plan.lines)
