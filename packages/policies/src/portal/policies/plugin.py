"""Portal plugin (entry point ``policies``): the spot, cheaper and return policies, and the
simulated cloud's catalog.

Each factory builds its policy from the config the host passes (``bounds`` or ``plugins``; see
:mod:`portal.policies.base`). Loading this module imports nothing of the policies (every
``portal`` command loads every plugin): the hooks import what they register when called.
"""

from __future__ import annotations

from portal.core.hookspecs import hookimpl
from portal.core.settings import boolean
from portal.core.specs import CatalogSpec, PlacementPolicySpec, SettingSpec


def _share(value: object) -> float:
    """A share of a price, from 0 to below 1 (``0.2``: a fifth)."""
    try:
        share = float(str(value).strip())
    except ValueError:
        share = -1.0
    if not 0.0 <= share < 1.0:
        raise ValueError("expected a share of the price from 0 to below 1, such as 0.2")
    return share


#: The policies that watch a running job when no setting says otherwise, in the order they are
#: asked: keeping the job's state safe first, then what it costs.
WATCHING = ("spot", "return", "cheaper")


def _names(value: object) -> tuple[str, ...]:
    """Policy names in order: a TOML list, or a text with commas (``spot,return,acme``)."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ValueError("expected policy names in order, such as spot,return,cheaper")
    names = tuple(str(item).strip() for item in items if str(item).strip())
    for name in names:
        if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise ValueError(
                f"{name!r} is not a policy name: give registered names (letters, digits, "
                "'-', '_'), such as spot,return,cheaper"
            )
    return names


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
def portal_settings() -> list[SettingSpec]:
    return [
        SettingSpec(
            name="placement.watch",
            parse=_names,
            default=",".join(WATCHING),
            env="PORTAL_PLACEMENT_WATCH",
            description="the placement policies that watch a running job on a cloud's offers, "
            "by their registered names, asked in this order (a plugin's as Portal's own)",
        ),
        SettingSpec(
            name="cheaper.move",
            parse=boolean,
            default=True,
            description="move a running job to a cheaper machine that holds it and whose notice "
            "can save its state",
        ),
        SettingSpec(
            name="cheaper.min_saving",
            parse=_share,
            default=0.2,
            description="the least share of its price a cheaper machine must save for a move",
        ),
        SettingSpec(
            name="return.move",
            parse=boolean,
            default=True,
            description="bring a job that left spot back once a spot notice can save its state",
        ),
    ]


@hookimpl
def portal_catalogs() -> list[CatalogSpec]:
    from portal.policies.simulated import catalog_spec

    return [catalog_spec()]
