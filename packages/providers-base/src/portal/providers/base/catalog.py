"""A provider's built-in catalog of machine types, read from a data file shipped in its package.

The state-size bound needs a machine's vCPUs without calling the provider, so each provider
package ships ``catalog.json`` (refreshed from the provider's listing API, as its README
describes) and looks types up there; a type not in it is left to the caller's fallback (the
provider's listing, or the default class). One implementation serves every provider.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from portal.core.domain import CapacityClass, MachineType

__all__ = ["Catalog"]


class Catalog:
    """The machine types in ``catalog.json`` of ``package``, for ``provider``."""

    def __init__(
        self, *, provider: str, package: str, spot_notice_s: float, filename: str = "catalog.json"
    ) -> None:
        self.provider = provider
        self.package = package
        self.filename = filename
        #: How long this provider's spot preemption notice is, in seconds.
        self.spot_notice_s = spot_notice_s

    @functools.cached_property
    def _types(self) -> tuple[MachineType, ...]:
        text = resources.files(self.package).joinpath(self.filename).read_text(encoding="utf-8")
        data: dict[str, Any] = json.loads(text)
        return tuple(
            MachineType(
                provider=self.provider,
                name=entry["name"],
                vcpus=int(entry["vcpus"]),
                memory_gib=float(entry["memory_gib"]),
                gpus=int(entry.get("gpus", 0)),
                gpu_model=entry.get("gpu_model"),
            )
            for entry in data["machine_types"]
        )

    def machine_types(self) -> tuple[MachineType, ...]:
        """Every machine type in the catalog (read once, then cached)."""
        return self._types

    def find(self, name: str) -> MachineType | None:
        """The entry for ``name`` (exact, as the provider spells it), or None."""
        return next((m for m in self._types if m.name == name), None)

    def pool_identity(
        self,
        machine_type: str,
        capacity: CapacityClass | str,
        *,
        region: str,
        zone: str | None = None,
    ) -> str:
        """The pool a machine belongs to, in the form :attr:`Offer.pool` uses, so a pool that
        reclaimed a machine can be left out of placements."""
        return f"{CapacityClass(capacity)}:{self.provider}:{machine_type}:{zone or region}"
