"""Save rates: how fast a machine of a class can save a checkpoint to a storage route.

The state-size bound needs two figures per provider, machine class and storage route: ``R``, the
bytes per second such a machine can save there, and ``t0``, the fixed start-up cost (reaching a
safe point, opening the upload). The package ships them in ``bounds.json`` with where each figure
came from; today every row is an initial estimate from published provider limits. The node will
measure real rates, and :meth:`RateBook.record` lets such a measurement override a row, so the
estimates are replaced one by one without editing the data file.
"""

from __future__ import annotations

import enum
import functools
import json
import threading
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any

import attrs

from portal.core.errors import InvalidArgumentError

__all__ = [
    "ANY_PROVIDER",
    "MachineClass",
    "Rate",
    "RateBook",
    "RateTable",
    "StorageRoute",
    "classify",
]

#: The provider key of rows that apply to a provider without rows of its own.
ANY_PROVIDER = "*"
_MB = 1_000_000


class MachineClass(enum.StrEnum):
    """Machine size bands by vCPUs: the network and disk limits that bound a save scale with them."""

    SMALL = "small"  # up to 4 vCPUs
    MEDIUM = "medium"  # up to 16
    LARGE = "large"  # up to 64
    XLARGE = "xlarge"  # more


class StorageRoute(enum.StrEnum):
    """Where the checkpoint goes, which decides how fast it can get there."""

    SAME_REGION = "same_region"
    CROSS_REGION = "cross_region"
    LOCAL_DISK = "local_disk"

    @property
    def words(self) -> str:
        """As plans name the route."""
        return {
            StorageRoute.SAME_REGION: "the same-region object store",
            StorageRoute.CROSS_REGION: "a cross-region object store",
            StorageRoute.LOCAL_DISK: "a local disk",
        }[self]


def _positive(_inst: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise InvalidArgumentError(
            f"{attribute.name} must be above 0, got {value!r}: a save rate is a positive number "
            "of bytes per second",
            details={attribute.name: value},
        )


def _non_negative(_inst: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if value < 0:
        raise InvalidArgumentError(
            f"{attribute.name} must be 0 or more, got {value!r}: a start-up cost is never negative",
            details={attribute.name: value},
        )


@attrs.frozen(kw_only=True)
class Rate:
    """``R`` and ``t0`` for one provider, machine class and storage route, and where they came from.

    ``measured`` tells a Portal measurement from an estimate, so a plan can say which it used.
    """

    bytes_per_s: float = attrs.field(validator=_positive)
    t0_s: float = attrs.field(validator=_non_negative)
    source: str = attrs.field(validator=attrs.validators.min_len(1))
    date: str = ""
    measured: bool = False

    @property
    def mb_per_s(self) -> float:
        return self.bytes_per_s / _MB


#: The upper vCPU limit of each class but the last (the bounds file's "classes" says the same).
_CLASS_LIMITS = ((MachineClass.SMALL, 4), (MachineClass.MEDIUM, 16), (MachineClass.LARGE, 64))


def classify(vcpus: int) -> MachineClass:
    """The class of a machine with ``vcpus`` vCPUs (small <= 4, medium <= 16, large <= 64, xlarge)."""
    if vcpus < 1:
        raise InvalidArgumentError(
            f"a machine has at least 1 vCPU, got {vcpus!r}; fix the catalog or listing that gave "
            "this size",
            details={"vcpus": vcpus},
        )
    for machine_class, limit in _CLASS_LIMITS:
        if vcpus <= limit:
            return machine_class
    return MachineClass.XLARGE


@functools.cache
def _bundled_text() -> str:
    return resources.files(__package__).joinpath("bounds.json").read_text(encoding="utf-8")


@attrs.frozen(kw_only=True)
class RateTable:
    """The rows of a bounds file, checked to be complete for the ``*`` provider."""

    rows: Mapping[tuple[str, MachineClass, StorageRoute], Rate]
    default_classes: Mapping[str, MachineClass]

    @classmethod
    def bundled(cls) -> RateTable:
        """The table shipped in the package (``bounds.json``)."""
        return _bundled_table()

    @classmethod
    def from_json(cls, text: str, *, origin: str = "bounds file") -> RateTable:
        """Parse a bounds file; every bad row is refused with its position and what is wrong."""
        try:
            data = json.loads(text)
            raw_rows: list[dict[str, Any]] = data["rows"]
            raw_defaults: dict[str, str] = data.get("default_class", {})
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidArgumentError(
                f"{origin} is not a bounds file ({type(exc).__name__}: {exc}); it needs a 'rows' "
                "list as the bundled bounds.json has",
            ) from None
        rows: dict[tuple[str, MachineClass, StorageRoute], Rate] = {}
        for index, row in enumerate(raw_rows):
            try:
                key = (str(row["provider"]), MachineClass(row["class"]), StorageRoute(row["route"]))
                rate = Rate(
                    bytes_per_s=float(row["rate_mb_s"]) * _MB,
                    t0_s=float(row["t0_s"]),
                    source=str(row["source"]),
                    date=str(row.get("date", "")),
                    measured=row.get("kind") == "measured",
                )
            except (KeyError, ValueError, TypeError) as exc:
                raise InvalidArgumentError(
                    f"row {index} of {origin} is not valid ({type(exc).__name__}: {exc}); each row "
                    "needs provider, class (small, medium, large, xlarge), route (same_region, "
                    "cross_region, local_disk), rate_mb_s > 0, t0_s >= 0 and source",
                    details={"row": index},
                ) from None
            if key in rows:
                raise InvalidArgumentError(
                    f"row {index} of {origin} repeats {key[0]} {key[1]} {key[2]}; keep one row per "
                    "provider, class and route",
                    details={"row": index},
                )
            rows[key] = rate
        missing = [
            f"{c} {r}"
            for c in MachineClass
            for r in StorageRoute
            if (ANY_PROVIDER, c, r) not in rows
        ]
        if missing:
            raise InvalidArgumentError(
                f"{origin} has no '*' rows for {', '.join(missing)}: a provider without rows of its "
                "own falls back to them, so each class and route needs one",
            )
        defaults = {ANY_PROVIDER: MachineClass.SMALL}
        defaults.update({p: MachineClass(c) for p, c in raw_defaults.items()})
        return cls(rows=rows, default_classes=defaults)

    def rate(self, provider: str, machine_class: MachineClass, route: StorageRoute) -> Rate:
        """The provider's own row, else the ``*`` row (always there)."""
        found = self.rows.get((provider, machine_class, route))
        if found is None:
            found = self.rows[(ANY_PROVIDER, machine_class, route)]
        return found

    def default_class(self, provider: str) -> MachineClass:
        """The class a machine of ``provider`` is sized as when its size cannot be looked up."""
        return self.default_classes.get(provider, self.default_classes[ANY_PROVIDER])


@functools.cache
def _bundled_table() -> RateTable:
    return RateTable.from_json(_bundled_text(), origin="the bundled bounds.json")


class RateBook:
    """The rates in force: the table, overridden by rates Portal measured.

    The node reports a measured ``R`` and ``t0`` after a real save (or a rehearsal); :meth:`record`
    keeps it, and from then on every bound for that provider, class and route uses it. It is the
    one mutable object here, so it holds a lock: the node's reporter and a planner may share it.
    """

    def __init__(self, table: RateTable | None = None) -> None:
        self._table = table or RateTable.bundled()
        self._lock = threading.Lock()
        self._measured: dict[tuple[str, MachineClass, StorageRoute], Rate] = {}

    @property
    def table(self) -> RateTable:
        return self._table

    def rate(self, provider: str, machine_class: MachineClass, route: StorageRoute) -> Rate:
        """The measured rate if Portal has one for exactly this key, else the table's."""
        with self._lock:
            measured = self._measured.get((provider, machine_class, route))
        return measured or self._table.rate(provider, machine_class, route)

    def default_class(self, provider: str) -> MachineClass:
        return self._table.default_class(provider)

    def record(
        self,
        *,
        provider: str,
        machine_class: MachineClass | str,
        route: StorageRoute | str,
        bytes_per_s: float,
        t0_s: float,
        source: str,
        date: str = "",
    ) -> Rate:
        """Keep a measured rate; it overrides the table for this provider, class and route.

        ``source`` says where it came from (e.g. ``"measured by node n-12 saving job-3, 4.1 GB"``).
        A bad figure is refused, never recorded: a zero rate would make every spot offer unusable.
        """
        if not provider:
            raise InvalidArgumentError("a measured rate needs the provider it was measured on")
        try:
            key = (provider, MachineClass(machine_class), StorageRoute(route))
        except ValueError:
            raise InvalidArgumentError(
                f"unknown machine class {machine_class!r} or storage route {route!r}; classes: "
                f"{', '.join(MachineClass)}; routes: {', '.join(StorageRoute)}",
                details={"machine_class": str(machine_class), "route": str(route)},
            ) from None
        rate = Rate(bytes_per_s=bytes_per_s, t0_s=t0_s, source=source, date=date, measured=True)
        with self._lock:
            self._measured[key] = rate
        return rate

    def record_all(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Record several measured rates (as :meth:`measured` returns them, e.g. after a restart)."""
        for row in rows:
            self.record(
                provider=str(row["provider"]),
                machine_class=str(row["class"]),
                route=str(row["route"]),
                bytes_per_s=float(row["rate_mb_s"]) * _MB,
                t0_s=float(row["t0_s"]),
                source=str(row["source"]),
                date=str(row.get("date", "")),
            )

    def measured(self) -> list[dict[str, Any]]:
        """The measured rates, as rows in the bounds file's form (to persist them)."""
        with self._lock:
            items = sorted(self._measured.items())
        return [
            {
                "provider": p,
                "class": str(c),
                "route": str(r),
                "rate_mb_s": rate.mb_per_s,
                "t0_s": rate.t0_s,
                "kind": "measured",
                "source": rate.source,
                "date": rate.date,
            }
            for (p, c, r), rate in items
        ]
