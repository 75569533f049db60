"""The simulated cloud's machines (``cloud: simulated``): local node processes as provisioned VMs.

``python -m portal.sim`` is the cloud's own console (reclaim, silence, release, list), for demos
and end-to-end tests; ``portal resume`` and ``portal move`` provision through
:class:`SimulatedMachines`.
"""

from portal.sim.machines import MACHINE_ENV, Machine, SimulatedMachines, load_cloud

__all__ = ["MACHINE_ENV", "Machine", "SimulatedMachines", "load_cloud"]
