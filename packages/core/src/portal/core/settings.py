"""Portal's settings, validated in one place.

Settings come from a mapping (a settings file, a job's options) and from environment variables,
the environment winning. A bad value is refused with :class:`InvalidSettingError` naming the
setting, the value, where it came from and what is accepted.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from portal.core.errors import InvalidSettingError

__all__ = ["CLOUDS", "PROBE_MODES", "Settings"]

PROBE_MODES = ("on", "full", "off")
#: Where ``portal resume`` and ``portal move`` find offers: this machine only, or the simulated
#: cloud (local node processes standing in for machines; see ``portal.sim``).
CLOUDS = ("local", "simulated")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _probe_mode(value: Any) -> str:
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        text = "on"
    if text in ("false", "0", "no"):
        text = "off"
    if text not in PROBE_MODES:
        raise ValueError(f"expected one of {', '.join(PROBE_MODES)}")
    return text


def _cloud(value: Any) -> str:
    text = str(value).strip().lower()
    if text not in CLOUDS:
        raise ValueError(f"expected one of {', '.join(CLOUDS)}")
    return text


def _positive_float(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError("expected a number") from None
    if not number > 0:
        raise ValueError("expected a number above 0")
    return number


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError("expected true or false")


def _control_db(value: Any) -> str:
    text = str(value).strip()
    if text.lower() == "sqlite":
        return "sqlite"
    if text.startswith(("postgresql://", "postgres://")):
        return text
    raise ValueError("expected sqlite (the embedded default) or a postgresql:// URL")


def _text(value: Any) -> str:
    text = str(value).strip()
    if not text:
        raise ValueError("expected a non-empty value")
    return text


# setting name -> (environment variable, parser, default)
_SCHEMA: dict[str, tuple[str | None, Callable[[Any], Any], Any]] = {
    "home": ("PORTAL_HOME", _text, None),
    "storage_url": ("PORTAL_STORAGE_URL", _text, None),
    "capture_probe": ("PORTAL_CAPTURE_PROBE", _probe_mode, "on"),
    "capture_probe_every_min": (None, _positive_float, 10.0),
    "capture_probe_every_s": ("PORTAL_CAPTURE_PROBE_EVERY_S", _positive_float, None),
    "notice_default_s": ("PORTAL_NOTICE_DEFAULT_S", _positive_float, 120.0),
    "spot.move_when_over": (None, _boolean, True),
    "cloud": ("PORTAL_CLOUD", _cloud, "local"),
    "simulated_cloud_data": ("PORTAL_SIMULATED_CLOUD_DATA", _text, None),
    # Where the control plane keeps jobs and events: ``sqlite`` (a file under PORTAL_HOME) or a
    # PostgreSQL server shared by many machines (``postgresql://user@host:port/db``).
    "control_db": ("PORTAL_CONTROL_DB", _control_db, "sqlite"),
}


@attrs.frozen(kw_only=True)
class Settings:
    """Validated settings. Build with :meth:`load`; read with attributes."""

    home: Path
    storage_url: str
    capture_probe: str
    capture_probe_every_s: float
    notice_default_s: float
    spot_move_when_over: bool
    cloud: str = "local"
    simulated_cloud_data: str | None = None
    control_db: str = "sqlite"

    @classmethod
    def load(
        cls,
        values: Mapping[str, Any] | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        source: str = "settings",
    ) -> Settings:
        """Merge ``values`` (from ``source``) with the environment and validate everything."""
        env = os.environ if environ is None else environ
        given = dict(values or {})
        unknown = sorted(set(given) - set(_SCHEMA))
        if unknown:
            raise InvalidSettingError(
                f"unknown setting {unknown[0]!r} in {source}; known settings: "
                f"{', '.join(sorted(_SCHEMA))}",
                details={"setting": unknown[0]},
            )
        resolved: dict[str, Any] = {}
        for name, (env_name, parse, default) in _SCHEMA.items():
            raw, origin = given.get(name, default), source
            if env_name and env.get(env_name, "") != "":
                raw, origin = env[env_name], f"environment variable {env_name}"
            if raw is None:
                resolved[name] = None
                continue
            try:
                resolved[name] = parse(raw)
            except ValueError as why:
                raise InvalidSettingError(
                    f"setting {name} has value {raw!r} (from {origin}): {why}. Fix it there, "
                    f"or remove it to use the default ({default!r})",
                    details={"setting": name, "value": str(raw), "origin": origin},
                ) from None
        home = Path(resolved["home"] or Path.home() / ".portal").expanduser()
        every_s = resolved["capture_probe_every_s"] or resolved["capture_probe_every_min"] * 60.0
        return cls(
            home=home,
            storage_url=resolved["storage_url"] or (home / "store").as_uri(),
            capture_probe=resolved["capture_probe"],
            capture_probe_every_s=every_s,
            notice_default_s=resolved["notice_default_s"],
            spot_move_when_over=resolved["spot.move_when_over"],
            cloud=resolved["cloud"],
            simulated_cloud_data=resolved["simulated_cloud_data"],
            control_db=resolved["control_db"],
        )
