"""Fuzzing the GCE value parsers, the catalog, and the plugin's registration."""

from __future__ import annotations

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

from portal.core.domain import CapacityClass, Offer
from portal.core.plugins import Plugins, get_plugin_manager
from portal.core.specs import NoticeSourceContext
from portal.providers.gcp import catalog, plugin
from portal.providers.gcp.notices import GcpNoticeSource
from portal.providers.gcp.parsing import (
    maintenance_stops_machine,
    parse_maintenance_event,
    parse_preempted,
)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=100))
def test_parsers_accept_or_refuse_with_value_error(text: str) -> None:
    with contextlib.suppress(ValueError):
        assert isinstance(parse_preempted(text), bool)
    try:
        value = parse_maintenance_event(text)
    except ValueError:
        return
    maintenance_stops_machine(value)


def test_documented_values() -> None:
    assert parse_preempted("TRUE") is True and parse_preempted("FALSE\n") is False
    assert not maintenance_stops_machine(parse_maintenance_event("NONE"))
    assert not maintenance_stops_machine(parse_maintenance_event("MIGRATE_ON_HOST_MAINTENANCE"))
    assert maintenance_stops_machine(parse_maintenance_event("TERMINATE_ON_HOST_MAINTENANCE"))


def test_catalog() -> None:
    types = catalog.load_machine_types()
    assert len(types) >= 40 and len({t.name for t in types}) == len(types)
    a100 = catalog.find("a2-highgpu-1g")
    assert a100 is not None and (a100.vcpus, a100.gpus) == (12, 1)
    assert catalog.find("n1-standard-4").memory_gib == 15.0  # type: ignore[union-attr]
    offer = Offer(
        machine_type=a100,
        region="us-central1",
        zone="us-central1-a",
        capacity=CapacityClass.SPOT,
        price_per_hour=1.0,
        notice_s=catalog.SPOT_NOTICE_S,
    )
    assert (
        catalog.pool_identity(
            "a2-highgpu-1g", CapacityClass.SPOT, region="us-central1", zone="us-central1-a"
        )
        == offer.pool
    )


def test_plugin_registers_the_source_and_the_catalog() -> None:
    pm = get_plugin_manager(autoload=False)
    pm.register(plugin, name="gcp")
    plugins = Plugins(pm)
    source = plugins.notice_source("gcp").factory(
        NoticeSourceContext(settings={"dmi_dir": "/nonexistent"})
    )
    assert isinstance(source, GcpNoticeSource) and source.detect() is False
    source.close()
    assert "gcp" in plugins.catalogs()
