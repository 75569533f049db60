from __future__ import annotations

import pluggy
import pytest
from policies_factories import C7I_LARGE, CATALOG, G6_XL, R7I_4XL, on_demand, spot

from portal.core.domain import MachineType
from portal.core.errors import InvalidArgumentError, PluginError
from portal.core.hookspecs import hookimpl
from portal.core.plugins import Plugins
from portal.core.specs import CatalogSpec
from portal.policies import (
    Bounds,
    MachineClass,
    RateBook,
    Sizer,
    SizeSource,
    StorageRoute,
    bound_bytes,
    wording,
)


def test_formula() -> None:
    assert bound_bytes(100e6, 120, 20) == 100e6 * 100 * 0.5


def test_a_notice_shorter_than_the_start_up_saves_nothing() -> None:
    assert bound_bytes(1e9, 10, 15) == 0


def test_negative_figures_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="no negative figures"):
        bound_bytes(1e8, -1, 10)


def test_on_demand_offers_have_no_bound() -> None:
    assert Bounds(Sizer(CATALOG)).of(on_demand(C7I_LARGE), StorageRoute.SAME_REGION) is None


def test_bound_of_a_catalog_type_uses_its_class_and_route() -> None:
    bounds = Bounds(Sizer(CATALOG))
    small = bounds.of(spot(C7I_LARGE), StorageRoute.SAME_REGION)
    medium = bounds.of(spot(R7I_4XL), StorageRoute.SAME_REGION)
    cross = bounds.of(spot(C7I_LARGE), StorageRoute.CROSS_REGION)
    assert small is not None and medium is not None and cross is not None
    assert small.sizing.machine_class is MachineClass.SMALL
    assert small.sizing.source is SizeSource.CATALOG and small.sizing.vcpus == 2
    assert medium.sizing.machine_class is MachineClass.MEDIUM
    assert small.bytes == 7_875_000_000
    assert cross.bytes < small.bytes < medium.bytes


def test_a_measured_rate_changes_the_bound_at_once() -> None:
    book = RateBook()
    bounds = Bounds(Sizer(CATALOG, rates=book), book)
    book.record(
        provider="aws",
        machine_class="small",
        route="same_region",
        bytes_per_s=50e6,
        t0_s=20,
        source="measured by node n-1",
    )
    bound = bounds.of(spot(C7I_LARGE), StorageRoute.SAME_REGION)
    assert bound is not None and bound.bytes == 50e6 * 100 * 0.5 and bound.rate.measured
    assert "50 MB/s (measured)" in wording.bound_note(bound)


def test_listing_is_asked_when_no_catalog_knows_the_type() -> None:
    asked: list[tuple[str, str]] = []

    def listing(provider: str, name: str) -> int | None:
        asked.append((provider, name))
        return 32 if name == "x9.8xlarge" else None

    sizer = Sizer(CATALOG, listing=listing)
    assert sizer.size("aws", "c7i.large").source is SizeSource.CATALOG
    sized = sizer.size("aws", "x9.8xlarge")
    assert (sized.source, sized.machine_class, sized.vcpus) == (
        SizeSource.LISTING,
        MachineClass.LARGE,
        32,
    )
    unknown = sizer.size("aws", "zz.huge")
    assert unknown.is_default and unknown.machine_class is MachineClass.SMALL
    assert asked == [("aws", "x9.8xlarge"), ("aws", "zz.huge")]


class _AcmeListing:
    """A provider plugin's listing (portal_machine_vcpus), as EC2's or Azure's answer it."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    @hookimpl
    def portal_machine_vcpus(self, provider: str, machine_type: str) -> int | None:
        self.asked.append((provider, machine_type))
        return 64 if (provider, machine_type) == ("acme", "a1.16xlarge") else None


def test_sizers_built_from_the_plugins_ask_the_providers_listings(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PORTAL_HOME", str(tmp_path))
    acme = _AcmeListing()
    plugins = Plugins(pluggy.PluginManager("portal"))
    from portal.core import hookspecs

    plugins.pm.add_hookspecs(hookspecs)
    plugins.pm.register(acme, name="acme")
    bounds = Bounds.from_plugins(plugins)
    sized = bounds.sizer.size("acme", "a1.16xlarge")
    assert (sized.source, sized.vcpus) == (SizeSource.LISTING, 64)
    assert bounds.sizer.size("acme", "a1.16xlarge").vcpus == 64
    assert bounds.sizer.size("acme", "zz.huge").is_default
    big = MachineType(provider="acme", name="a1.16xlarge", vcpus=1, memory_gib=128)
    note = wording.bound_note(bounds.of(spot(big), StorageRoute.SAME_REGION))  # type: ignore[arg-type]
    assert "64 vCPUs from the provider's listing" in note, note
    assert acme.asked == [("acme", "a1.16xlarge"), ("acme", "zz.huge")]  # each asked once


def test_a_failing_listing_is_a_plugin_error_naming_the_type() -> None:
    def listing(provider: str, name: str) -> int | None:
        raise TimeoutError("DescribeInstanceTypes timed out")

    with pytest.raises(PluginError, match=r"look up aws zz\.huge: TimeoutError"):
        Sizer(listing=listing).size("aws", "zz.huge")


def test_a_default_sized_offer_says_so_in_its_note() -> None:
    unknown = MachineType(provider="aws", name="zz.huge", vcpus=400, memory_gib=4000)
    bound = Bounds(Sizer(CATALOG)).of(spot(unknown), StorageRoute.SAME_REGION)
    assert bound is not None and bound.sizing.is_default
    assert wording.bound_note(bound).endswith(
        "small class: its size could not be looked up, so it is sized as its default class)"
    )


class _FakeCatalog:
    def __init__(self, name: str, provider: str, types: list[MachineType]) -> None:
        self.name, self.provider, self.types = name, provider, types

    @hookimpl
    def portal_catalogs(self) -> list[CatalogSpec]:
        return [
            CatalogSpec(name=self.name, provider=self.provider, machine_types=lambda: self.types)
        ]


def test_sizes_come_from_every_registered_catalog(pm: pluggy.PluginManager) -> None:
    pm.register(
        _FakeCatalog(
            "acme", "acme", [MachineType(provider="acme", name="a1", vcpus=48, memory_gib=96)]
        )
    )
    pm.register(_FakeCatalog("aws_types", "aws", [G6_XL]))
    sizer = Sizer.from_plugins(Plugins(pm))
    assert sizer.size("acme", "a1").machine_class is MachineClass.LARGE
    assert sizer.size("aws", "g6.xlarge").source is SizeSource.CATALOG


def test_the_providers_own_catalog_wins_over_a_copy(pm: pluggy.PluginManager) -> None:
    wrong = MachineType(provider="aws", name="g6.xlarge", vcpus=96, memory_gib=16)
    pm.register(_FakeCatalog("copy", "simulated", [wrong]))
    pm.register(_FakeCatalog("aws_types", "aws", [G6_XL]))
    assert Sizer.from_plugins(Plugins(pm)).size("aws", "g6.xlarge").vcpus == 4


def test_a_failing_catalog_is_named(pm: pluggy.PluginManager) -> None:
    class Broken:
        @hookimpl
        def portal_catalogs(self) -> list[CatalogSpec]:
            def boom() -> list[MachineType]:
                raise OSError("catalog.json missing")

            return [CatalogSpec(name="broken", provider="x", machine_types=boom)]

    pm.register(Broken())
    with pytest.raises(PluginError, match="catalog 'broken' failed to list"):
        Bounds.from_plugins(Plugins(pm))
