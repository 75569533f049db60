"""The policies' view of ``PlacementContext.settings``: typed, validated, in one place.

Core's :class:`~portal.core.specs.PlacementContext` carries free-form settings so that policies
can evolve without changing core. These are the keys Portal's policies read:

``current_offer``
    The :class:`~portal.core.domain.Offer` the job runs on now (move-when-over, cheaper, return).
``on``
    The ``--on`` spec the job is pinned to (a string or an :class:`OnSpec`).
``spot.move_when_over``
    Whether a job that outgrows its spot notice is moved (default true).
``spot_only``
    The job was run with ``--spot-only``: on-demand capacity is not its to take (default false).
``no_spot``
    The job was placed where it runs with ``--no-spot``: spot is not its to take (default false).
``cheaper.move``, ``cheaper.min_saving``
    Whether a running job is moved to a cheaper machine that fits (default true), and the least
    share of its price such a machine must save (default 0.2: a fifth).
``return.move``
    Whether a job that left spot goes back once a spot notice can save its state (default true).
``storage.route``
    ``same_region``, ``cross_region`` or ``local_disk``; otherwise derived from ``storage_url``
    (a ``file://`` or plain path is a local disk) and ``storage.region`` (another region than
    the offer's is cross-region).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from portal.core.domain import Offer
from portal.core.errors import InvalidSettingError
from portal.policies.rates import StorageRoute
from portal.policies.request import OnSpec

__all__ = [
    "CHEAPER_MIN_SAVING",
    "CHEAPER_MOVE",
    "CURRENT_OFFER",
    "DEFAULT_MIN_SAVING",
    "MOVE_WHEN_OVER",
    "NO_SPOT",
    "ON",
    "RETURN_MOVE",
    "SPOT_ONLY",
    "STORAGE_REGION",
    "STORAGE_ROUTE",
    "STORAGE_URL",
    "PlacementOptions",
]

CURRENT_OFFER = "current_offer"
ON = "on"
MOVE_WHEN_OVER = "spot.move_when_over"
SPOT_ONLY = "spot_only"
NO_SPOT = "no_spot"
CHEAPER_MOVE = "cheaper.move"
CHEAPER_MIN_SAVING = "cheaper.min_saving"
RETURN_MOVE = "return.move"
#: A move to a cheaper machine must save at least this share of the price (default).
DEFAULT_MIN_SAVING = 0.2
STORAGE_ROUTE = "storage.route"
STORAGE_REGION = "storage.region"
STORAGE_URL = "storage_url"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _bad(name: str, value: object, accepted: str) -> InvalidSettingError:
    return InvalidSettingError(
        f"placement setting {name} has value {value!r}; expected {accepted}. Fix it where the "
        "placement context is built, or leave it out for the default",
        details={"setting": name, "value": repr(value)},
    )


def _flag(settings: Mapping[str, Any], name: str, *, default: bool) -> bool:
    value = settings.get(name, default)
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in _TRUE | _FALSE:
        raise _bad(name, value, "true or false")
    return text in _TRUE


@attrs.frozen(kw_only=True)
class PlacementOptions:
    """Validated placement settings (build with :meth:`read`)."""

    current: Offer | None = None
    on: OnSpec | None = None
    move_when_over: bool = True
    spot_only: bool = False
    no_spot: bool = False
    cheaper_move: bool = True
    min_saving: float = DEFAULT_MIN_SAVING
    return_move: bool = True
    route: StorageRoute | None = None
    storage_region: str | None = None
    storage_url: str | None = None

    @classmethod
    def read(cls, settings: Mapping[str, Any]) -> PlacementOptions:
        current = settings.get(CURRENT_OFFER)
        if current is not None and not isinstance(current, Offer):
            raise _bad(CURRENT_OFFER, current, "an Offer (portal.core.domain.Offer)")
        on = settings.get(ON)
        if isinstance(on, str):
            on = OnSpec.parse(on)
        elif on is not None and not isinstance(on, OnSpec):
            raise _bad(ON, on, "an --on spec such as spot:aws:c7i.large:us-east-1")
        move = _flag(settings, MOVE_WHEN_OVER, default=True)
        spot_only = _flag(settings, SPOT_ONLY, default=False)
        saving = settings.get(CHEAPER_MIN_SAVING, DEFAULT_MIN_SAVING)
        try:
            min_saving = float(saving)
        except (TypeError, ValueError):
            min_saving = -1.0
        if not 0.0 <= min_saving < 1.0:
            raise _bad(CHEAPER_MIN_SAVING, saving, "a share of the price from 0 to below 1")
        route = settings.get(STORAGE_ROUTE)
        if route is not None:
            try:
                route = StorageRoute(route)
            except ValueError:
                raise _bad(STORAGE_ROUTE, route, ", ".join(StorageRoute)) from None
        region = settings.get(STORAGE_REGION)
        url = settings.get(STORAGE_URL)
        return cls(
            current=current,
            on=on,
            move_when_over=move,
            spot_only=spot_only,
            no_spot=_flag(settings, NO_SPOT, default=False),
            cheaper_move=_flag(settings, CHEAPER_MOVE, default=True),
            min_saving=min_saving,
            return_move=_flag(settings, RETURN_MOVE, default=True),
            route=route,
            storage_region=str(region) if region else None,
            storage_url=str(url) if url else None,
        )

    def route_for(self, offer: Offer) -> StorageRoute:
        """The storage route a checkpoint from ``offer`` takes."""
        if self.route is not None:
            return self.route
        if self.storage_url is not None and (
            self.storage_url.startswith("file://") or "://" not in self.storage_url
        ):
            return StorageRoute.LOCAL_DISK
        if self.storage_region is not None and self.storage_region != offer.region:
            return StorageRoute.CROSS_REGION
        return StorageRoute.SAME_REGION

    def pinned(self, offer: Offer) -> bool:
        """Whether an exact ``--on`` names this offer (the user's choice, kept over the bound)."""
        return self.on is not None and self.on.exact and self.on.matches(offer)
