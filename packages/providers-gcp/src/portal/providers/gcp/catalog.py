"""The built-in catalog of common gcp spot machine types (vCPUs, memory, GPUs), and pool identity.

The state-size bound needs a machine's vCPUs without calling the provider, so the package ships a
data file (``catalog.json``, refreshed from Compute Engine machineTypes as README.md describes) and looks
types up there; a type not in it is left to the caller's fallback (the provider's listing, or the
default class).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from portal.core.domain import CapacityClass, MachineType

__all__ = ["PROVIDER", "SPOT_NOTICE_S", "find", "load_machine_types", "pool_identity"]

PROVIDER = "gcp"
#: How long this provider's spot preemption notice is, in seconds (the state-size bound's notice).
SPOT_NOTICE_S = 30.0


@functools.cache
def _load() -> tuple[MachineType, ...]:
    text = resources.files(__package__).joinpath("catalog.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return tuple(
        MachineType(
            provider=PROVIDER,
            name=entry["name"],
            vcpus=int(entry["vcpus"]),
            memory_gib=float(entry["memory_gib"]),
            gpus=int(entry.get("gpus", 0)),
            gpu_model=entry.get("gpu_model"),
        )
        for entry in data["machine_types"]
    )


def load_machine_types() -> tuple[MachineType, ...]:
    """Every machine type in the built-in catalog (read once, then cached)."""
    return _load()


def find(name: str) -> MachineType | None:
    """The catalog's entry for ``name`` (exact, as the provider spells it), or None."""
    for machine in _load():
        if machine.name == name:
            return machine
    return None


def pool_identity(
    machine_type: str, capacity: CapacityClass | str, *, region: str, zone: str | None = None
) -> str:
    """The pool a machine belongs to, in the form :attr:`portal.core.domain.Offer.pool` uses, so a
    pool that reclaimed a machine can be left out of placements."""
    return f"{CapacityClass(capacity)}:{PROVIDER}:{machine_type}:{zone or region}"
