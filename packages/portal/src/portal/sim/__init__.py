"""The simulated cloud's machines (``cloud: simulated``): local node processes as provisioned VMs.

``python -m portal.sim`` is the cloud's own console (reclaim, silence, release, list), for demos
and end-to-end tests; ``portal resume`` and ``portal move`` provision through
:class:`SimulatedMachines`. The names load on first use: every process that loads plugins imports
the light ``portal.sim.plugin``, and with it this package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from portal.sim.machines import MACHINE_ENV, Machine, SimulatedMachines, load_cloud

__all__ = ["MACHINE_ENV", "Machine", "SimulatedMachines", "load_cloud"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("portal.sim.machines"), name)
    raise AttributeError(f"module 'portal.sim' has no attribute {name!r}")
