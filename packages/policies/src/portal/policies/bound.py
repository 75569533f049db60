"""The state-size bound: what a spot machine can save within its notice.

``bound = R x (notice - t0) x 0.5``: ``R`` the bytes per second a machine of that class can save
to the storage route, ``t0`` the fixed start-up cost (reaching a safe point, opening the upload),
and the half a safety factor for everything a notice does not promise (a late notice, a slow
store, a busy network). The figures come from a :class:`~portal.policies.rates.RateBook`; the
machine's class from a :class:`~portal.policies.sizing.Sizer`. A :class:`Bound` keeps every input,
so plans and events can say how it was reached.
"""

from __future__ import annotations

import attrs

from portal.core.domain import Offer
from portal.core.errors import InvalidArgumentError
from portal.core.plugins import Plugins
from portal.policies.rates import Rate, RateBook, StorageRoute
from portal.policies.sizing import Listing, Sizer, Sizing

__all__ = ["SAFETY", "Bound", "Bounds", "bound_bytes"]

#: The share of the ideal save that the bound counts on.
SAFETY = 0.5


def bound_bytes(bytes_per_s: float, notice_s: float, t0_s: float) -> int:
    """``R x (notice - t0) x 0.5`` in whole bytes; a notice shorter than ``t0`` saves nothing."""
    if bytes_per_s < 0 or notice_s < 0 or t0_s < 0:
        raise InvalidArgumentError(
            f"the bound takes no negative figures (R={bytes_per_s!r} B/s, notice={notice_s!r} s, "
            f"t0={t0_s!r} s); fix the rate table or the offer's notice",
            details={"rate": bytes_per_s, "notice_s": notice_s, "t0_s": t0_s},
        )
    return int(max(0.0, bytes_per_s * (notice_s - t0_s) * SAFETY))


@attrs.frozen(kw_only=True)
class Bound:
    """What one spot offer's notice can save, with every input that made the figure."""

    bytes: int
    notice_s: float
    rate: Rate
    sizing: Sizing
    route: StorageRoute

    def figures(self) -> dict[str, object]:
        """For a decision's ``figures``: plain values, as ``portal explain --json`` shows them."""
        return {
            "bound_bytes": self.bytes,
            "notice_s": self.notice_s,
            "rate_bytes_per_s": self.rate.bytes_per_s,
            "t0_s": self.rate.t0_s,
            "rate_source": self.rate.source,
            "rate_measured": self.rate.measured,
            "machine_class": str(self.sizing.machine_class),
            "sized_from": str(self.sizing.source),
            "route": str(self.route),
        }


class Bounds:
    """Computes offers' bounds from a sizer and a rate book (what the policies are built with)."""

    def __init__(self, sizer: Sizer | None = None, rates: RateBook | None = None) -> None:
        self.rates = rates or RateBook()
        self.sizer = sizer or Sizer(rates=self.rates)

    @classmethod
    def from_plugins(
        cls, plugins: Plugins, *, listing: Listing | None = None, rates: RateBook | None = None
    ) -> Bounds:
        """Bounds sized from every registered catalog (the usual way the CLI and node build it)."""
        book = rates or RateBook()
        return cls(Sizer.from_plugins(plugins, listing=listing, rates=book), book)

    def of(self, offer: Offer, route: StorageRoute) -> Bound | None:
        """The offer's bound, or None when the offer is not reclaimed (nothing to bound)."""
        if not offer.capacity.interruptible or offer.notice_s is None:
            return None
        sizing = self.sizer.size(offer.provider, offer.machine_type.name)
        rate = self.rates.rate(offer.provider, sizing.machine_class, route)
        return Bound(
            bytes=bound_bytes(rate.bytes_per_s, offer.notice_s, rate.t0_s),
            notice_s=offer.notice_s,
            rate=rate,
            sizing=sizing,
            route=route,
        )
