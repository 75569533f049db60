"""Portal's placement policies: where a job may run, given what its spot notice can save.

The state-size bound (``R x (notice - t0) x 0.5``, per provider, machine class and storage route)
decides which spot offers can save a job's state within their notice; the state's measure always
says which figure it is. On that rule stand the policies registered through
``portal_placement_policies`` (``spot``, ``cheaper``, ``return``), the resume/move planner behind
``portal resume --plan`` and ``portal move --plan``, the 30-minute exclusion of a pool that
reclaimed a machine, and a simulated cloud of offers for local runs.

What hosts call::

    bounds = Bounds.from_plugins(plugins)               # sizes from every portal_catalogs plugin
    plan = Planner(bounds, exclusions).plan(job, offers, context, PlacementRequest.from_flags(
        "resume", gpu="L4"))
    print(plan.render()); plan.chosen; plan.events(at=clock.now())
    bounds.rates.record(provider="aws", machine_class="small", route="same_region",
                        bytes_per_s=..., t0_s=..., source="measured by node ...")
"""

from typing import TYPE_CHECKING

from portal.core.plugins import lazy_exports

if TYPE_CHECKING:
    from portal.policies.bound import Bound, Bounds, bound_bytes
    from portal.policies.cheaper import CheaperPolicy
    from portal.policies.exclusions import EXCLUSION_S, PoolExclusions
    from portal.policies.measure import Figure, StateSample, choose, measure_job
    from portal.policies.options import PlacementOptions
    from portal.policies.planner import Plan, Planner
    from portal.policies.rates import (
        MachineClass,
        Rate,
        RateBook,
        RateTable,
        StorageRoute,
        classify,
    )
    from portal.policies.request import Action, OnSpec, PlacementRequest
    from portal.policies.return_ import ReturnPolicy
    from portal.policies.simulated import SimulatedCloud
    from portal.policies.sizing import Sizer, SizeSource, Sizing
    from portal.policies.spot import SpotPolicy

#: Each public name and the module it lives in: imported on first use, so that loading the
#: plugin (``portal.policies.plugin``, with every ``portal`` command) costs none of it.
_EXPORTS = {
    "Action": "request",
    "Bound": "bound",
    "Bounds": "bound",
    "CheaperPolicy": "cheaper",
    "EXCLUSION_S": "exclusions",
    "Figure": "measure",
    "MachineClass": "rates",
    "OnSpec": "request",
    "PlacementOptions": "options",
    "PlacementRequest": "request",
    "Plan": "planner",
    "Planner": "planner",
    "PoolExclusions": "exclusions",
    "Rate": "rates",
    "RateBook": "rates",
    "RateTable": "rates",
    "ReturnPolicy": "return_",
    "SimulatedCloud": "simulated",
    "SizeSource": "sizing",
    "Sizer": "sizing",
    "Sizing": "sizing",
    "SpotPolicy": "spot",
    "StateSample": "measure",
    "StorageRoute": "rates",
    "bound_bytes": "bound",
    "choose": "measure",
    "classify": "rates",
    "measure_job": "measure",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "EXCLUSION_S",
    "Action",
    "Bound",
    "Bounds",
    "CheaperPolicy",
    "Figure",
    "MachineClass",
    "OnSpec",
    "PlacementOptions",
    "PlacementRequest",
    "Plan",
    "Planner",
    "PoolExclusions",
    "Rate",
    "RateBook",
    "RateTable",
    "ReturnPolicy",
    "SimulatedCloud",
    "SizeSource",
    "Sizer",
    "Sizing",
    "SpotPolicy",
    "StateSample",
    "StorageRoute",
    "bound_bytes",
    "choose",
    "classify",
    "measure_job",
]
