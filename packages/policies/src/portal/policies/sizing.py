"""A machine's size for the bound: its vCPUs, from a catalog, a provider listing, or its default.

The bound depends on the machine's class, and the class on its vCPUs. Portal takes a named type's
vCPUs from its own catalogs (every ``portal_catalogs`` plugin), else from the provider's listing
of the type (a callback the provider package supplies: EC2 DescribeInstanceTypes, Azure SKUs...).
An offer's own machine type is not trusted for this: a price feed may build one with a
placeholder size. A type neither knows is sized as its provider's default class, and the sizing
says so, so the offer's note and the plan can tell the user.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from portal.core.domain import MachineType
from portal.core.errors import PluginError
from portal.core.plugins import Plugins
from portal.core.settings import Settings
from portal.policies.rates import MachineClass, RateBook, classify

__all__ = ["Listing", "SizeSource", "Sizer", "Sizing", "plugin_listing"]

log = logging.getLogger("portal.policies")

#: A provider listing: ``(provider, type name) -> vCPUs``, or None when it does not know the type.
Listing = Callable[[str, str], int | None]


class SizeSource(enum.StrEnum):
    CATALOG = "catalog"
    LISTING = "listing"
    DEFAULT = "default"


@attrs.frozen(kw_only=True)
class Sizing:
    """A machine's class and where its size came from (``vcpus`` is None for a default class)."""

    provider: str
    name: str
    machine_class: MachineClass
    source: SizeSource
    vcpus: int | None = None

    @property
    def is_default(self) -> bool:
        return self.source is SizeSource.DEFAULT


def plugin_listing(plugins: Plugins) -> Listing:
    """The providers' own listings (``portal_machine_vcpus``: EC2's instance types, Azure's
    resource SKUs), each type asked once per listing, with the settings as Portal resolves
    them (read on the first question: a sizer that never meets an unknown type reads none)."""
    answers: dict[tuple[str, str], int | None] = {}
    resolved: list[dict[str, Any]] = []  # the settings, once read

    def listing(provider: str, name: str) -> int | None:
        key = (provider, name)
        if key not in answers:
            if not resolved:
                try:
                    resolved.append(dict(Settings.load(plugins=plugins).values))
                except Exception as exc:  # a bad settings file is told where it is read
                    log.warning("settings for the providers' listings unreadable: %s", exc)
                    resolved.append({})
            answers[key] = plugins.machine_vcpus(provider, name, resolved[0])
        return answers[key]

    return listing


class Sizer:
    """Looks up machine sizes: catalogs first, then the listing, then the default class."""

    def __init__(
        self,
        machine_types: Iterable[MachineType] = (),
        *,
        listing: Listing | None = None,
        rates: RateBook | None = None,
    ) -> None:
        self._types: dict[tuple[str, str], MachineType] = {}
        for machine in machine_types:
            self._types.setdefault((machine.provider, machine.name), machine)
        self._listing = listing
        self._rates = rates or RateBook()

    @classmethod
    def from_plugins(
        cls, plugins: Plugins, *, listing: Listing | None = None, rates: RateBook | None = None
    ) -> Sizer:
        """A sizer over every registered catalog.

        When two catalogs list the same type, the provider's own catalog (``spec.provider`` equal
        to the type's provider) wins over others (a simulated cloud that copies it).
        """
        own: list[MachineType] = []
        others: list[MachineType] = []
        for spec in plugins.catalogs().values():
            try:
                types = list(spec.machine_types())
            except Exception as exc:
                raise PluginError(
                    f"catalog {spec.name!r} failed to list its machine types: "
                    f"{type(exc).__name__}: {exc}. Fix or uninstall the plugin that registers it",
                    details={"catalog": spec.name},
                ) from exc
            for machine in types:
                (own if machine.provider == spec.provider else others).append(machine)
        return cls(
            [*own, *others],
            listing=listing if listing is not None else plugin_listing(plugins),
            rates=rates,
        )

    @property
    def machine_types(self) -> list[MachineType]:
        """Every type the catalogs know (GPU models for ``--gpu`` come from these too)."""
        return list(self._types.values())

    def known(self, provider: str, name: str) -> MachineType | None:
        return self._types.get((provider, name))

    def size(self, provider: str, name: str) -> Sizing:
        """The machine's class, and whether a catalog, the listing or the default decided it."""
        machine = self._types.get((provider, name))
        if machine is not None:
            return Sizing(
                provider=provider,
                name=name,
                machine_class=classify(machine.vcpus),
                source=SizeSource.CATALOG,
                vcpus=machine.vcpus,
            )
        if self._listing is not None:
            try:
                vcpus = self._listing(provider, name)
            except Exception as exc:
                raise PluginError(
                    f"the provider listing failed to look up {provider} {name}: "
                    f"{type(exc).__name__}: {exc}. Check the provider's credentials, or add the "
                    "type to the provider's catalog",
                    details={"provider": provider, "type": name},
                ) from exc
            if vcpus is not None:
                return Sizing(
                    provider=provider,
                    name=name,
                    machine_class=classify(vcpus),
                    source=SizeSource.LISTING,
                    vcpus=vcpus,
                )
        return Sizing(
            provider=provider,
            name=name,
            machine_class=self._rates.default_class(provider),
            source=SizeSource.DEFAULT,
        )
