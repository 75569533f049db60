"""What a placement on the simulated cloud is decided from: its offers, bounds, excluded pools.

One place for the CLI (``portal resume``, ``portal move``) and the node (moving a job that
outgrows its spot machine): the offers are the simulated cloud's; the bounds are sized from its
machine types with its save rates standing in for the node's measured ones; the pools that
reclaimed a machine in the last 30 minutes come from the control plane's reclaims.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from portal.control.plane import ControlPlane
from portal.core.domain import Job, Offer
from portal.core.specs import PlacementContext, StateMeasure
from portal.policies import (
    EXCLUSION_S,
    Bounds,
    PlacementRequest,
    Plan,
    Planner,
    PoolExclusions,
    RateBook,
    Sizer,
)
from portal.policies.options import (
    CURRENT_OFFER,
    MOVE_WHEN_OVER,
    NO_SPOT,
    ON,
    SPOT_ONLY,
    STORAGE_ROUTE,
)
from portal.sim.machines import SimulatedMachines

__all__ = ["SPOT_ONLY_EVENT", "SimulatedPlacing"]

#: The event that records a job's ``--spot-only`` wish (``portal run --spot-only``); every later
#: resume, move and spot watch reads it again.
SPOT_ONLY_EVENT = "spot-only"


class SimulatedPlacing:
    """The inputs of every placement decision on the simulated cloud."""

    def __init__(self, plane: ControlPlane, machines: SimulatedMachines | None = None) -> None:
        self.plane = plane
        self.machines = machines or SimulatedMachines(plane)

    def offers(self) -> list[Offer]:
        return list(self.machines.cloud.offers())

    def bounds(self) -> Bounds:
        """Sized from the simulated cloud's types, with its save rates as the measured ones."""
        book = RateBook()
        cloud = self.machines.cloud
        cloud.record_rates(book)
        return Bounds(Sizer(cloud.machine_types(), rates=book), book)

    def exclusions(self) -> PoolExclusions:
        """The pools that reclaimed a machine in the last 30 minutes (from the control plane)."""
        exclusions = PoolExclusions(self.plane.clock)
        since = self.plane.clock.now() - EXCLUSION_S
        for pool, at in self.plane.store.reclaims(since):
            exclusions.reclaimed(pool, at)
        return exclusions

    def context(
        self,
        measure: StateMeasure | None,
        current: Offer | None = None,
        *,
        pinned: str | None = None,
        spot_only: bool = False,
        no_spot: bool = False,
        extra: Mapping[str, Any] | None = None,
    ) -> PlacementContext:
        """The policies' context; ``pinned`` is the ``--on`` the job was placed with (exact or not),
        ``spot_only`` whether it was run ``--spot-only``, ``no_spot`` whether it was placed
        where it runs with ``--no-spot``; ``extra``: the policies' own settings
        (``cheaper.move``...)."""
        # A simulated machine saves to its region's store: the simulated same-region rates apply,
        # though the bytes land on this disk.
        settings: dict[str, Any] = {
            **(extra or {}),
            STORAGE_ROUTE: "same_region",
            MOVE_WHEN_OVER: self.plane.settings.spot_move_when_over,
            SPOT_ONLY: spot_only,
            NO_SPOT: no_spot,
        }
        if current is not None:
            settings[CURRENT_OFFER] = current
        if pinned is not None:
            settings[ON] = pinned
        return self.exclusions().apply(
            PlacementContext(clock=self.plane.clock, state=measure, settings=settings)
        )

    def plan(
        self,
        job: Job,
        request: PlacementRequest,
        measure: StateMeasure | None,
        current: Offer | None = None,
    ) -> Plan:
        return Planner(self.bounds(), self.exclusions()).plan(
            job, self.offers(), self.context(measure, current), request
        )
