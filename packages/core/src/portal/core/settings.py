"""Portal's settings, validated in one place, from one stack of layers.

Lowest first: the defaults; ``PORTAL_HOME/config.toml`` (this user, every shell); ``portal.toml``
in the project's directory (the directory a command runs in: the job's); the values a caller
passes (a job's options); the environment's ``PORTAL_*`` variables. A higher layer wins, and
every value remembers the layer it came from (``portal config show``). A file's keys are the
settings' names (``spot.move_when_over`` is ``move_when_over`` in a ``[spot]`` table); a key no
setting has, or a bad value, is refused with :class:`InvalidSettingError` naming the setting, the
value, the file and line it came from, and what is accepted.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from portal.core.errors import InvalidSettingError

__all__ = [
    "CHECKPOINT_EVERY_SPOT_S",
    "CLOUDS",
    "CONFIG_NAME",
    "PROBE_MODES",
    "PROJECT_NAME",
    "Settings",
    "checkpoint_every",
    "parse_duration",
    "read_settings_file",
    "setting_names",
]

#: This user's settings file, in PORTAL_HOME.
CONFIG_NAME = "config.toml"
#: A project's settings file, in the directory a command runs in.
PROJECT_NAME = "portal.toml"

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


def _count(value: Any) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ValueError("expected a whole number") from None
    if number < 1:
        raise ValueError("expected a whole number of at least 1")
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


def _control_plane(value: Any) -> str:
    text = str(value).strip().rstrip("/")
    if text.startswith(("http://", "https://")) and len(text.split("://", 1)[1]) > 0:
        return text
    raise ValueError("expected the control-plane service's http:// or https:// URL")


_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
#: ``checkpoint_every = auto``: every 30 minutes on a spot machine, off on any other.
CHECKPOINT_EVERY_SPOT_S = 1800.0


def parse_duration(value: Any) -> float:
    """Seconds in ``30s``, ``10m``, ``1h`` or a plain number of seconds (``45``, ``2.5``)."""
    text = str(value).strip().lower()
    unit = _DURATION_UNITS.get(text[-1:]) if text else None
    number = text[:-1] if unit is not None else text
    try:
        seconds = float(number) * (unit or 1.0)
    except ValueError:
        raise ValueError(
            "expected a duration such as 30s, 10m, 1h or a number of seconds"
        ) from None
    if not 0 < seconds < float("inf"):
        raise ValueError("expected a duration above 0 (30s, 10m, 1h)")
    return seconds


def checkpoint_every(value: Any) -> float | None:
    """The ``checkpoint_every`` setting: ``auto`` (None), ``off`` (0.0) or seconds."""
    text = str(value).strip().lower()
    if text == "auto":
        return None
    if text == "off":
        return 0.0
    try:
        return parse_duration(text)
    except ValueError as why:
        raise ValueError(f"{why}, or auto, or off") from None


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
    # A control-plane service (`portal server`) to use instead of a store of this machine's own,
    # and this user's token for it (`portal server token create USER`).
    "control_plane": ("PORTAL_CONTROL_PLANE", _control_plane, None),
    "control_token": ("PORTAL_TOKEN", _text, None),
    # The CA certificate (PEM) an https:// control plane's certificate is checked against, when
    # it is not one the system trusts (a private CA, a self-signed certificate).
    "control_ca": ("PORTAL_CONTROL_CA", _text, None),
    # Periodic checkpoints, the safety net for a machine lost without notice: ``auto`` (every
    # 30 minutes on a spot machine, off elsewhere), ``off``, or a duration (``10m``).
    "checkpoint_every": ("PORTAL_CHECKPOINT_EVERY", checkpoint_every, "auto"),
    # Every this many checkpoints, one shares no chunk with those before it (a full copy): one
    # damaged chunk then reaches at most this many, and an intact restore point always exists.
    "checkpoint_independent_every": ("PORTAL_CHECKPOINT_INDEPENDENT_EVERY", _count, 4),
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
    control_plane: str | None = None
    control_token: str | None = attrs.field(default=None, repr=False)  # a secret: kept out of logs
    control_ca: str | None = None
    #: None: ``auto``; 0.0: ``off``; else the seconds between periodic checkpoints.
    checkpoint_every: float | None = None
    checkpoint_independent_every: int = 4
    #: Where each setting's value came from (``default``, a file and line, a variable).
    origins: Mapping[str, str] = attrs.field(factory=dict, eq=False, repr=False)
    #: Each setting's parsed value, by the setting's name (``spot.move_when_over``).
    values: Mapping[str, Any] = attrs.field(factory=dict, eq=False, repr=False)

    def checkpoint_interval(self, purchase: str) -> float | None:
        """Seconds between periodic checkpoints on a machine bought ``purchase`` (``spot``,
        ``on-demand``, ``unknown``); None when it takes none."""
        if self.checkpoint_every is None:
            return CHECKPOINT_EVERY_SPOT_S if purchase == "spot" else None
        return self.checkpoint_every or None

    @classmethod
    def load(
        cls,
        values: Mapping[str, Any] | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        source: str = "settings",
        project: Path | bool | None = True,
    ) -> Settings:
        """Every layer merged (see the module), validated. ``values`` come from ``source``;
        ``project``: the directory whose ``portal.toml`` counts (True: the current one; False
        or None: none)."""
        env = os.environ if environ is None else environ
        given = dict(values or {})
        unknown = sorted(set(given) - set(_SCHEMA))
        if unknown:
            raise InvalidSettingError(
                f"unknown setting {unknown[0]!r} in {source}; known settings: "
                f"{', '.join(sorted(_SCHEMA))}",
                details={"setting": unknown[0]},
            )
        home_value = env.get("PORTAL_HOME") or given.get("home")
        home_path = Path(str(home_value) if home_value else Path.home() / ".portal").expanduser()
        layers: list[tuple[str, Mapping[str, tuple[Any, str]]]] = [
            ("file", read_settings_file(home_path / CONFIG_NAME))
        ]
        directory = Path.cwd() if project is True else project or None
        if directory:
            layers.append(("file", read_settings_file(Path(directory) / PROJECT_NAME)))
        layers.append(("given", {k: (v, source) for k, v in given.items()}))
        resolved: dict[str, Any] = {}
        origins: dict[str, str] = {}
        for name, (env_name, parse, default) in _SCHEMA.items():
            raw, origin = default, "default"
            for _, layer in layers:
                if name in layer:
                    raw, origin = layer[name]
            if env_name and env.get(env_name, "") != "":
                raw, origin = env[env_name], f"environment variable {env_name}"
            origins[name] = origin
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
            control_plane=resolved["control_plane"],
            control_token=resolved["control_token"],
            control_ca=resolved["control_ca"],
            checkpoint_every=resolved["checkpoint_every"],
            checkpoint_independent_every=resolved["checkpoint_independent_every"],
            origins=origins,
            values={name: resolved[name] for name in _SCHEMA},
        )

    def explain(self) -> list[tuple[str, Any, str]]:
        """Each setting's effective value and the layer it came from, by name."""
        return [
            (name, self.values.get(name), self.origins.get(name, "default")) for name in _SCHEMA
        ]


def setting_names() -> list[str]:
    """Every setting's name, as files and ``portal config`` spell them."""
    return sorted(_SCHEMA)


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def _line_of(text: str, name: str) -> int | None:
    """The line where ``name``'s last part is set (``move_when_over`` for ``spot.move_when_over``),
    for messages; None when not found."""
    last = re.escape(name.rsplit(".", 1)[-1])
    for number, line in enumerate(text.splitlines(), 1):
        if re.match(rf"\s*([\w.\"']*\.)?[\"']?{last}[\"']?\s*=", line):
            return number
    return None


def read_settings_file(path: Path) -> dict[str, tuple[Any, str]]:
    """The settings ``path`` sets, each with where (``FILE line N``); an absent file sets none.

    Refuses, naming the file (and line): a file that cannot be read, is not UTF-8, is not TOML,
    or sets a key that is no setting."""
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return {}
    except UnicodeDecodeError:
        raise InvalidSettingError(
            f"{path} is not text (not UTF-8): a settings file holds TOML; fix it, or remove it",
            details={"file": str(path)},
        ) from None
    except OSError as why:
        raise InvalidSettingError(
            f"cannot read {path} ({why.strerror}): fix its permissions, or remove it",
            details={"file": str(path)},
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as why:
        raise InvalidSettingError(
            f"{path} is not valid TOML ({why}): fix it, or remove it",
            details={"file": str(path)},
        ) from None
    found: dict[str, tuple[Any, str]] = {}
    for name, value in _flatten(data).items():
        line = _line_of(text, name)
        where = f"{path} line {line}" if line else str(path)
        if name not in _SCHEMA:
            raise InvalidSettingError(
                f"unknown setting {name!r} in {where}; known settings: "
                f"{', '.join(sorted(_SCHEMA))}. Fix the name, or remove it",
                details={"setting": name, "file": str(path), "line": line},
            )
        found[name] = (value, where)
    return found
