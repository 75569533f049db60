"""What a Ray node says about the machine under it: Ray custom resources, read and written here.

Ray schedules on resources, so Portal's facts about a machine ride on them. Every Portal node
of a cell carries exactly one capacity resource and one machine-type resource::

    {"portal.spot": 1, "portal.notice_s": 120, "portal.type:c7i.large": 1}   # spot, 2-minute notice
    {"portal.on_demand": 1, "portal.type:m7i.large": 1}                     # on-demand

* ``portal.spot`` / ``portal.on_demand``: how the machine is bought;
* ``portal.notice_s``: the notice length in seconds (its quantity is the length, so a task can
  even ask for "a notice of at least 90 s" as ``{"portal.notice_s": 90}``); spot only;
* ``portal.type:<name>``: the provider's machine type, as ``accelerator_type:A100`` names a GPU.

Resources rather than node labels: resources exist on every Ray version Portal supports, and
``ray start --resources '{...}'`` (or the autoscaler's node types) sets them with no code.
A node without a capacity resource (a head node that only runs Ray's services) is not Portal's.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from portal.core.domain import CapacityClass, MachineType, Offer
from portal.core.errors import InvalidArgumentError

__all__ = ["MARK_ENV", "NOTICE", "ON_DEMAND", "SPOT", "TYPE_PREFIX", "NodeKind"]

#: In the environment of every process a node agent starts: the Ray node's id (the mark its
#: keeper kills by, :mod:`portal.ray_engine.keeper`).
MARK_ENV = "PORTAL_RAY_NODE"

SPOT = "portal.spot"
ON_DEMAND = "portal.on_demand"
NOTICE = "portal.notice_s"
TYPE_PREFIX = "portal.type:"


def _positive_notice(
    instance: NodeKind, attribute: attrs.Attribute[float | None], value: float | None
) -> None:
    if instance.spot and (value is None or value <= 0):
        raise InvalidArgumentError(
            f"a spot Ray node needs its notice length: give notice_s (e.g. 120 for AWS), not "
            f"{value!r}, so that Portal knows how long it has to checkpoint a job there",
            details={"notice_s": value},
        )
    if not instance.spot and value is not None:
        raise InvalidArgumentError(
            f"an on-demand Ray node gets no notice: drop notice_s={value!r} or make it spot",
            details={"notice_s": value},
        )


def _machine_type_name(instance: NodeKind, attribute: attrs.Attribute[str], value: str) -> None:
    if not value or any(c.isspace() for c in value):
        raise InvalidArgumentError(
            f"machine type {value!r} of a Ray node is not a type name: give the provider's name, "
            "e.g. c7i.large",
            details={"machine_type": value},
        )


@attrs.frozen(kw_only=True)
class NodeKind:
    """How a Ray node's machine is bought, its notice length and its type."""

    spot: bool
    machine_type: str = attrs.field(validator=_machine_type_name)
    notice_s: float | None = attrs.field(default=None, validator=_positive_notice)

    @classmethod
    def spot_node(cls, machine_type: str, notice_s: float) -> NodeKind:
        return cls(spot=True, machine_type=machine_type, notice_s=notice_s)

    @classmethod
    def on_demand_node(cls, machine_type: str) -> NodeKind:
        return cls(spot=False, machine_type=machine_type)

    @property
    def purchase(self) -> str:
        """As Portal's node calls it (``spot`` / ``on-demand``): it decides periodic checkpoints."""
        return "spot" if self.spot else "on-demand"

    def resources(self) -> dict[str, float]:
        """The custom resources to start the Ray node with."""
        found: dict[str, float] = {TYPE_PREFIX + self.machine_type: 1.0}
        if self.spot:
            found[SPOT] = 1.0
            found[NOTICE] = float(self.notice_s or 0.0)
        else:
            found[ON_DEMAND] = 1.0
        return found

    @classmethod
    def from_resources(cls, resources: Mapping[str, float]) -> NodeKind | None:
        """The kind a node's resources say, or None for a node that is not Portal's."""
        spot, on_demand = SPOT in resources, ON_DEMAND in resources
        if not spot and not on_demand:
            return None
        types = [
            name.removeprefix(TYPE_PREFIX) for name in resources if name.startswith(TYPE_PREFIX)
        ]
        if (spot and on_demand) or len(types) != 1:
            raise InvalidArgumentError(
                f"a Ray node's Portal resources are inconsistent ({sorted(resources)}): give "
                f"exactly one of {SPOT} or {ON_DEMAND}, and one {TYPE_PREFIX}<machine type>",
                details={"resources": sorted(resources)},
            )
        notice = resources.get(NOTICE) if spot else None
        return cls(spot=spot, machine_type=types[0], notice_s=notice)

    def offer(
        self, *, provider: str, region: str, vcpus: int = 2, memory_gib: float = 4.0
    ) -> Offer:
        """The node as the placement policies see an offer (prices are the cell's concern)."""
        return Offer(
            machine_type=MachineType(
                provider=provider, name=self.machine_type, vcpus=vcpus, memory_gib=memory_gib
            ),
            region=region,
            capacity=CapacityClass.SPOT if self.spot else CapacityClass.ON_DEMAND,
            price_per_hour=0.0,
            notice_s=self.notice_s,
        )

    def describe(self) -> str:
        """``spot c7i.large (notice 120 s)`` / ``on-demand m7i.large``."""
        if self.spot:
            return f"spot {self.machine_type} (notice {self.notice_s:g} s)"
        return f"on-demand {self.machine_type}"
