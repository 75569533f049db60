"""What every Portal policy shares: how it is configured, and how decisions are ordered.

A policy is built by its spec's factory from a config mapping. The host (CLI, node, control plane)
passes ``bounds`` (a :class:`~portal.policies.bound.Bounds`, sharing its rate book with the node's
measurements) or ``plugins`` (its :class:`~portal.core.plugins.Plugins`, whose catalogs size the
machines); with neither, the installed plugins are loaded on first use, so a policy built by a
bare factory call still sizes machines from Portal's catalogs.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from portal.core.domain import Decision, Job, Offer, Verdict
from portal.core.errors import InvalidArgumentError
from portal.core.plugins import Plugins
from portal.core.specs import PlacementContext
from portal.policies import wording
from portal.policies.bound import Bounds
from portal.policies.measure import GIB, measure_job
from portal.policies.options import PlacementOptions
from portal.policies.screen import Screen, Screened, fits, room_on

__all__ = ["Policy", "bounds_from_config", "cheapest_first"]


def bounds_from_config(config: Mapping[str, Any]) -> Bounds | None:
    """The bounds a config names, or None to load the installed catalogs lazily."""
    bounds = config.get("bounds")
    if bounds is not None:
        if not isinstance(bounds, Bounds):
            raise InvalidArgumentError(
                f"policy config 'bounds' must be a portal.policies.Bounds, got "
                f"{type(bounds).__name__}; build one with Bounds.from_plugins(plugins)"
            )
        return bounds
    plugins = config.get("plugins")
    if plugins is not None:
        if not isinstance(plugins, Plugins):
            raise InvalidArgumentError(
                f"policy config 'plugins' must be a portal.core.plugins.Plugins, got "
                f"{type(plugins).__name__}"
            )
        return Bounds.from_plugins(plugins)
    return None


def cheapest_first(screened: Iterable[Screened]) -> list[Screened]:
    """Cheapest first; at equal price on-demand first (not reclaimed), then by name (stable)."""
    return sorted(
        screened,
        key=lambda s: (
            s.offer.price_per_hour,
            s.offer.capacity.interruptible,
            s.offer.describe(),
        ),
    )


class Policy:
    """Base of Portal's policies: config, the shared screen, and decision assembly."""

    name = "policy"

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        self._bounds = bounds_from_config(config or {})
        self._lock = threading.Lock()

    @property
    def bounds(self) -> Bounds:
        with self._lock:
            if self._bounds is None:
                self._bounds = Bounds.from_plugins(Plugins.load())
            return self._bounds

    def screen(self, job: Job, context: PlacementContext) -> tuple[Screen, PlacementOptions]:
        options = PlacementOptions.read(context.settings)
        measure = measure_job(job, context.state)
        return Screen(self.bounds, context, options, measure), options

    def use(self, screened: Screened, reason: str) -> list[Decision]:
        """A ``use`` decision, then the warnings the offer carries."""
        return [
            Decision(
                policy=self.name,
                verdict=Verdict.USE,
                reason=reason,
                offer=screened.offer,
                figures=screened.figures,
            ),
            *screened.warns(self.name),
        ]

    def assemble(
        self, kept: Sequence[tuple[Screened, str]], dropped: Sequence[Screened]
    ) -> list[Decision]:
        """``use`` decisions best first (with their warnings), then the skips in offer order."""
        decisions: list[Decision] = []
        for screened, reason in kept:
            decisions.extend(self.use(screened, reason))
        decisions.extend(s.skip(self.name) for s in dropped)
        return decisions

    def cheapest_holding(
        self,
        job: Job,
        offers: Sequence[Offer],
        screen: Screen,
        options: PlacementOptions,
        wanted: Callable[[Offer], bool],
    ) -> Screened | None:
        """Where a running job may move: the cheapest offer ``wanted`` by the policy that the
        shared rules keep, that its ``--on`` names, that holds it (:func:`fits`) and, when it is
        spot, whose notice saves the state with room to spare (:func:`room_on`); None if none."""
        current, measure = options.current, screen.measure
        assert current is not None and measure is not None
        candidates: list[Screened] = []
        for offer in offers:
            if not wanted(offer) or (options.on is not None and not options.on.matches(offer)):
                continue
            screened = screen.one(offer)
            if (
                screened.kept
                and fits(offer, current, measure, job)
                and (not offer.capacity.interruptible or room_on(measure, screened.bound))
            ):
                candidates.append(screened)
        return cheapest_first(candidates)[0] if candidates else None

    def provision_then_move(
        self,
        target: Offer,
        current: Offer,
        *,
        provision: str,
        move: str,
        figures: Mapping[str, Any],
    ) -> list[Decision]:
        """A running job's move as the node carries it out: ``provision`` ``target`` ahead
        (step 1), then ``move`` the job there once it is ready (step 2), with the figures."""
        moved = {
            **figures,
            "from_pool": current.pool,
            "to_pool": target.pool,
            "to_price_per_hour": target.price_per_hour,
            "to_memory_bytes": math.floor(target.machine_type.memory_gib * GIB),
        }
        return [
            Decision(
                policy=self.name,
                verdict=Verdict.PROVISION,
                reason=provision,
                offer=target,
                figures={**moved, "step": 1},
            ),
            Decision(
                policy=self.name,
                verdict=Verdict.MOVE,
                reason=move,
                offer=target,
                figures={**moved, "step": 2, "when": "ready"},
            ),
        ]

    @staticmethod
    def plain_reason(screened: Screened) -> str:
        return wording.usable(screened.offer, screened.bound)
