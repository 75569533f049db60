"""Pools left out of new placements after a reclaim.

A pool that just reclaimed a machine is likely to reclaim the next one too, so for 30 minutes
Portal places nothing new there. The pool's identity is :attr:`portal.core.domain.Offer.pool`
(capacity, provider, type, zone or region). Time comes from the injected clock, so tests move it
forward instead of waiting.
"""

from __future__ import annotations

import threading

import attrs

from portal.core.clock import SYSTEM_CLOCK, Clock
from portal.core.domain import Offer
from portal.core.errors import InvalidArgumentError
from portal.core.specs import PlacementContext

__all__ = ["EXCLUDED_UNTIL", "EXCLUSION_S", "PoolExclusions"]

#: How long a pool that reclaimed a machine is left out of new placements.
EXCLUSION_S = 30 * 60.0
#: The placement setting carrying ``{pool: until}``, so plans can say when a pool is back.
EXCLUDED_UNTIL = "excluded_until"


class PoolExclusions:
    """Which pools are left out now, and until when.

    Mutable (the node reports reclaims as they happen) and locked, like every shared record.
    """

    def __init__(self, clock: Clock = SYSTEM_CLOCK, *, window_s: float = EXCLUSION_S) -> None:
        if not window_s > 0:
            raise InvalidArgumentError(
                f"an exclusion window must be above 0 seconds, got {window_s!r}",
                details={"window_s": window_s},
            )
        self._clock = clock
        self._window_s = window_s
        self._until: dict[str, float] = {}
        self._lock = threading.Lock()

    def reclaimed(self, pool: str | Offer, at: float | None = None) -> float:
        """Record that ``pool`` reclaimed a machine at ``at`` (default now); returns when it is back.

        A second reclaim extends the exclusion; an older report never shortens it.
        """
        key = pool.pool if isinstance(pool, Offer) else pool
        if not key:
            raise InvalidArgumentError("a reclaim needs the pool it happened in (Offer.pool)")
        until = (self._clock.now() if at is None else at) + self._window_s
        with self._lock:
            self._until[key] = max(until, self._until.get(key, 0.0))
            return self._until[key]

    def active(self) -> dict[str, float]:
        """Every pool left out now, with when it is back (expired ones are forgotten)."""
        now = self._clock.now()
        with self._lock:
            for key in [k for k, until in self._until.items() if until <= now]:
                del self._until[key]
            return dict(self._until)

    def excluded(self) -> frozenset[str]:
        return frozenset(self.active())

    def until(self, pool: str | Offer) -> float | None:
        """When ``pool`` is back, or None if it is not left out now."""
        key = pool.pool if isinstance(pool, Offer) else pool
        return self.active().get(key)

    def apply(self, context: PlacementContext) -> PlacementContext:
        """The context with these pools left out, and when each is back, for the policies."""
        active = self.active()
        settings = dict(context.settings)
        known: dict[str, float] = dict(settings.get(EXCLUDED_UNTIL) or {})
        known.update(active)
        settings[EXCLUDED_UNTIL] = known
        return attrs.evolve(
            context, excluded_pools=context.excluded_pools | frozenset(active), settings=settings
        )
