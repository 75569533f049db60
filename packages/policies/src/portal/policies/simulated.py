"""A simulated cloud: deterministic offers across providers, regions, types and capacity.

Local runs and tests need offers that look like the real thing (AWS's 120 s notice, GCP's and
Azure's 30 s, spot at a fraction of on-demand, GPU types in some regions only) without a cloud
account. Everything comes from ``simulated.json``, so the same data gives the same offers every
time. It registers as the catalog ``simulated`` (provider ``simulated``: its machine types carry
their real providers, and a host picks offer sources by catalog name, so simulated capacity is
never mistaken for real). The simulated save rates stand in for the rates the node measures;
provisioning local "machines" for these offers plugs in later through :meth:`SimulatedCloud.offer`
and :meth:`SimulatedCloud.save_seconds`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from importlib import resources
from typing import Any

from portal.core.domain import CapacityClass, MachineType, Offer
from portal.core.errors import InvalidArgumentError
from portal.core.specs import CatalogSpec
from portal.policies.rates import MachineClass, RateBook, StorageRoute, classify

__all__ = ["CATALOG_NAME", "SimulatedCloud"]

CATALOG_NAME = "simulated"
_DESCRIPTION = (
    "a simulated cloud (aws, gcp, azure) with deterministic offers, for local runs and tests; "
    "not real capacity"
)
_MB = 1_000_000


class SimulatedCloud:
    """The simulated providers, their offers and save rates (read-only once built)."""

    def __init__(self, data: dict[str, Any]) -> None:
        try:
            self._build(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidArgumentError(
                f"simulated cloud data is not valid ({type(exc).__name__}: {exc}); compare it "
                "with the bundled simulated.json"
            ) from None

    def _build(self, data: dict[str, Any]) -> None:
        types: list[MachineType] = []
        offers: list[Offer] = []
        self._notice: dict[str, float] = {}
        for provider, spec in sorted(data["providers"].items()):
            notice_s = float(spec["spot_notice_s"])
            self._notice[provider] = notice_s
            regions: dict[str, dict[str, float]] = spec["regions"]
            for entry in spec["machine_types"]:
                machine = MachineType(
                    provider=provider,
                    name=entry["name"],
                    vcpus=int(entry["vcpus"]),
                    memory_gib=float(entry["memory_gib"]),
                    gpus=int(entry.get("gpus", 0)),
                    gpu_model=entry.get("gpu_model"),
                )
                types.append(machine)
                for region in sorted(entry.get("regions", regions)):
                    place = regions[region]
                    on_demand = round(float(entry["price"]) * place["price_factor"], 4)
                    spot = round(on_demand * place["spot_fraction"], 4)
                    offers.append(
                        Offer(
                            machine_type=machine,
                            region=region,
                            capacity=CapacityClass.ON_DEMAND,
                            price_per_hour=on_demand,
                        )
                    )
                    offers.append(
                        Offer(
                            machine_type=machine,
                            region=region,
                            capacity=CapacityClass.SPOT,
                            price_per_hour=spot,
                            notice_s=notice_s,
                        )
                    )
        self._types = tuple(types)
        self._offers = tuple(offers)
        self._storage: dict[tuple[str, StorageRoute, MachineClass], tuple[float, float]] = {}
        for provider, routes in data.get("storage", {}).items():
            for route, classes in routes.items():
                for machine_class, (mb_s, t0_s) in classes.items():
                    key = (provider, StorageRoute(route), MachineClass(machine_class))
                    self._storage[key] = (float(mb_s) * _MB, float(t0_s))

    @classmethod
    def bundled(cls) -> SimulatedCloud:
        """The cloud described by the package's ``simulated.json`` (built once)."""
        return _bundled()

    @property
    def providers(self) -> list[str]:
        return sorted(self._notice)

    def machine_types(self) -> tuple[MachineType, ...]:
        return self._types

    def offers(self, region: str | None = None) -> tuple[Offer, ...]:
        """Every offer, or those of one region; a region no provider has is an error."""
        if region is None:
            return self._offers
        found = tuple(o for o in self._offers if o.region == region)
        if not found:
            regions = sorted({o.region for o in self._offers})
            raise InvalidArgumentError(
                f"the simulated cloud has no region {region!r}; its regions: {', '.join(regions)}",
                details={"region": region},
            )
        return found

    def offer(self, pool: str) -> Offer:
        """The offer of a pool identity (what a local provisioner gets to start a machine)."""
        for offer in self._offers:
            if offer.pool == pool:
                return offer
        raise InvalidArgumentError(
            f"the simulated cloud has no pool {pool!r}; pools look like {self._offers[0].pool!r}",
            details={"pool": pool},
        )

    def spot_notice_s(self, provider: str) -> float:
        return self._notice[provider]

    def save_seconds(self, offer: Offer, n_bytes: int, route: StorageRoute) -> float | None:
        """How long a simulated machine takes to save ``n_bytes`` (``t0 + bytes / R``), or None
        when the data has no rate for its provider, class and route."""
        rate = self._storage.get((offer.provider, route, classify(offer.machine_type.vcpus)))
        if rate is None:
            return None
        bytes_per_s, t0_s = rate
        return t0_s + n_bytes / bytes_per_s

    def record_rates(self, book: RateBook) -> None:
        """Record the simulated save rates in ``book``, as the node's measurements would be."""
        for (provider, route, machine_class), (bytes_per_s, t0_s) in sorted(self._storage.items()):
            book.record(
                provider=provider,
                machine_class=machine_class,
                route=route,
                bytes_per_s=bytes_per_s,
                t0_s=t0_s,
                source="simulated cloud (simulated.json), standing in for a node's measurement",
            )

    def catalog_spec(self) -> CatalogSpec:
        """This cloud as a ``portal_catalogs`` registration."""
        return CatalogSpec(
            name=CATALOG_NAME,
            provider=CATALOG_NAME,
            machine_types=self.machine_types,
            offers=self.offers,
            description=_DESCRIPTION,
        )


@functools.cache
def _bundled() -> SimulatedCloud:
    text = resources.files(__package__).joinpath("simulated.json").read_text(encoding="utf-8")
    return SimulatedCloud(json.loads(text))


def _machine_types() -> Iterable[MachineType]:
    return SimulatedCloud.bundled().machine_types()


def _offers(region: str | None) -> Iterable[Offer]:
    return SimulatedCloud.bundled().offers(region)


def catalog_spec() -> CatalogSpec:
    """The registration the plugin returns (loads the data file on first use, not at import)."""
    return CatalogSpec(
        name=CATALOG_NAME,
        provider=CATALOG_NAME,
        machine_types=_machine_types,
        offers=_offers,
        description=_DESCRIPTION,
    )
