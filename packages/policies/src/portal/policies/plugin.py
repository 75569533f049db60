"""Portal plugin (entry point ``policies``): the spot, cheaper and return policies, and the
simulated cloud's catalog.

Each factory builds its policy from the config the host passes (``bounds`` or ``plugins``; see
:mod:`portal.policies.base`). Loading this module imports nothing of the policies (every
``portal`` command loads every plugin): the hooks import what they register when called.
"""

from __future__ import annotations

from portal.core.hookspecs import hookimpl
from portal.core.specs import CatalogSpec, PlacementPolicySpec


@hookimpl
def portal_placement_policies() -> list[PlacementPolicySpec]:
    from portal.policies.cheaper import make_cheaper
    from portal.policies.return_ import make_return
    from portal.policies.spot import make_spot

    return [
        PlacementPolicySpec(
            name="spot",
            factory=make_spot,
            description="spot where the notice can save the job's state, on-demand otherwise; "
            "moves a job off spot when its state outgrows the notice",
        ),
        PlacementPolicySpec(
            name="cheaper",
            factory=make_cheaper,
            description="moves a job to a cheaper offer that can still save its state",
        ),
        PlacementPolicySpec(
            name="return",
            factory=make_return,
            description="brings a job that left spot back to spot once a notice can save it",
        ),
    ]


@hookimpl
def portal_catalogs() -> list[CatalogSpec]:
    from portal.policies.simulated import catalog_spec

    return [catalog_spec()]
