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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from portal.core.errors import InvalidSettingError, PluginError
from portal.core.specs import SettingSpec

if TYPE_CHECKING:
    from portal.core.plugins import Plugins

__all__ = [
    "CHECKPOINT_EVERY_SPOT_S",
    "CLOUDS",
    "CONFIG_NAME",
    "CORE_SETTINGS",
    "MAX_GIB",
    "MAX_SECONDS",
    "MIN_DURATION_S",
    "PROBE_MODES",
    "PROJECT_NAME",
    "Settings",
    "boolean",
    "checkpoint_every",
    "count",
    "gib",
    "minutes",
    "parse_duration",
    "positive_float",
    "read_settings_file",
    "seconds",
    "secret_settings",
    "setting_names",
    "text",
]

#: This user's settings file, in PORTAL_HOME.
CONFIG_NAME = "config.toml"
#: A project's settings file, in the directory a command runs in.
PROJECT_NAME = "portal.toml"

PROBE_MODES = ("on", "full", "off")
#: Where ``portal resume`` and ``portal move`` find offers: this machine only, or the simulated
#: cloud (local node processes standing in for machines; see ``portal.sim``).
CLOUDS = ("local", "simulated")
#: The longest time Portal reads anywhere (a notice, a timeout, an interval): a year and a day.
#: Longer is a typo or an attack (``inf``, ``1e300``), never a plan, and a deadline past the
#: platform's clock breaks every place that prints it (a node died formatting ``inf``).
MAX_SECONDS = 366 * 86_400.0
#: The shortest duration written as one (``checkpoint_every``, ``--checkpoint-every``): a tenth
#: of a second; ``0.0001s`` would have the job do nothing but checkpoints.
MIN_DURATION_S = 0.1
#: The most memory (or state) Portal reads, in GiB: a pebibyte, more than any machine has.
MAX_GIB = 1024.0**2
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


def positive_float(value: Any) -> float:
    """A finite number above 0 (``2``, ``0.5``, ``"2.5"``; never ``inf`` or ``nan``)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError("expected a number") from None
    if not 0 < number < float("inf"):
        raise ValueError("expected a finite number above 0")
    return number


def _up_to(value: Any, limit: float, what: str) -> float:
    """A number above 0 and at most ``limit``, or a refusal saying ``what`` is expected (the
    same words for a bad number, ``inf``, ``nan`` and one too large)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not 0 < number <= limit:
        raise ValueError(f"expected {what}")
    return number


def seconds(value: Any) -> float:
    """A number of seconds above 0 and at most :data:`MAX_SECONDS` (a notice's length, a
    poll interval, a timeout): every place that reads one reads it here."""
    return _up_to(
        value, MAX_SECONDS, f"a number of seconds above 0 and at most {MAX_SECONDS:.0f} (366 days)"
    )


def minutes(value: Any) -> float:
    """A number of minutes above 0 and at most :data:`MAX_SECONDS` in minutes."""
    limit = MAX_SECONDS / 60
    return _up_to(value, limit, f"a number of minutes above 0 and at most {limit:.0f} (366 days)")


def gib(value: Any) -> float:
    """A memory or state size in GiB, above 0 and at most :data:`MAX_GIB` (a pebibyte)."""
    return _up_to(value, MAX_GIB, f"a number of GiB above 0 and at most {MAX_GIB:.0f} (a pebibyte)")


def count(value: Any) -> int:
    """A whole number of at least 1."""
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ValueError("expected a whole number") from None
    if number < 1:
        raise ValueError("expected a whole number of at least 1")
    return number


def boolean(value: Any) -> bool:
    """TOML's true/false, or true/false, yes/no, on/off, 1/0 as text (an environment variable)."""
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


#: ``checkpoint_every = auto``: every 30 minutes on a spot machine, off on any other.
CHECKPOINT_EVERY_SPOT_S = 1800.0


def parse_duration(value: Any, *, at_most: float = MAX_SECONDS) -> float:
    """Seconds in a duration as people write one: ``30s``, ``10m``, ``1h30m``, ``2 days``,
    ``1:30:00``, or a plain number of seconds (``45``), from :data:`MIN_DURATION_S` to
    ``at_most`` (a year and a day unless the caller reads a longer one: a token's lifetime).
    Read by pytimeparse2 (a small, kept parser of exactly this; imported when a duration is
    read, so start-up does not pay)."""
    from pytimeparse2 import parse

    text = str(value).strip()
    parsed = parse(text) if text else None
    if parsed is None:
        raise ValueError("expected a duration such as 30s, 10m, 1h30m or a number of seconds")
    number = float(parsed)
    if not MIN_DURATION_S <= number <= at_most:  # nan fails too
        longest = f"{at_most / 86_400:.0f} days"
        raise ValueError(
            f"expected a duration from {MIN_DURATION_S:g}s to {longest} (30s, 10m, 1h30m)"
        )
    return number


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


def text(value: Any) -> str:
    """Any non-empty text (surrounding spaces removed)."""
    text = str(value).strip()
    if not text:
        raise ValueError("expected a non-empty value")
    return text


def _token(value: Any) -> str:
    """A token as the server writes one: printable ASCII without spaces. (A token pasted with
    its line's end went into a request header, and the refusal printed its bytes.)"""
    text = str(value).strip()
    if not text or not all("!" <= c <= "~" for c in text):
        raise ValueError(
            "expected a token as `portal-server token create` prints it (letters, digits and "
            "punctuation, no spaces or line breaks inside)"
        )
    return text


def _core(
    name: str,
    parse: Callable[[Any], Any],
    default: Any,
    env: str | None,
    what: str,
    *,
    secret: bool = False,
) -> SettingSpec:
    return SettingSpec(
        name=name, parse=parse, default=default, env=env, description=what, secret=secret
    )


def _home(value: Any) -> Path:
    """Portal's home as an absolute path (``~/.portal`` by default): a relative one is taken
    from the directory the command runs in, once, so that the node (which runs elsewhere) and
    the store's ``file://`` URL mean the same folder."""
    return Path(str(value) if value else Path.home() / ".portal").expanduser().absolute()


#: Portal's own settings; plugins add theirs through the ``portal_settings`` hook.
CORE_SETTINGS: tuple[SettingSpec, ...] = (
    _core("home", text, None, "PORTAL_HOME", "Portal's home: config.toml, keys, the local store"),
    _core("storage_url", text, None, "PORTAL_STORAGE_URL", "where checkpoints are stored"),
    _core("capture_probe", _probe_mode, "on", "PORTAL_CAPTURE_PROBE", "the checkpoint check"),
    _core("capture_probe_every_min", minutes, 10.0, None, "minutes between two checks"),
    _core(
        "capture_probe_every_s",
        seconds,
        None,
        "PORTAL_CAPTURE_PROBE_EVERY_S",
        "seconds between two checks (wins over capture_probe_every_min)",
    ),
    _core(
        "notice_default_s",
        seconds,
        120.0,
        "PORTAL_NOTICE_DEFAULT_S",
        "the notice portal notice gives",
    ),
    _core("spot.move_when_over", boolean, True, None, "move a job that outgrows its spot notice"),
    _core("cloud", _cloud, "local", "PORTAL_CLOUD", "where resume and move find offers"),
    _core(
        "simulated_cloud_data",
        text,
        None,
        "PORTAL_SIMULATED_CLOUD_DATA",
        "the simulated cloud's offers",
    ),
    # ``sqlite`` (a file under PORTAL_HOME) or a PostgreSQL server shared by many machines.
    _core("control_db", _control_db, "sqlite", "PORTAL_CONTROL_DB", "where jobs are kept"),
    # A control-plane service (`portal server`) to use instead of a store of this machine's own,
    # and this user's token for it (`portal server token create USER`).
    _core("control_plane", _control_plane, None, "PORTAL_CONTROL_PLANE", "a portal server's URL"),
    _core(
        "control_token",
        _token,
        None,
        "PORTAL_TOKEN",
        "this user's token for the portal server",
        secret=True,
    ),
    # The CA certificate (PEM) an https:// control plane's certificate is checked against, when
    # it is not one the system trusts (a private CA, a self-signed certificate).
    _core("control_ca", text, None, "PORTAL_CONTROL_CA", "the portal server's CA certificate"),
    # ``auto`` (every 30 minutes on a spot machine, off elsewhere), ``off``, or a duration.
    _core(
        "checkpoint_every",
        checkpoint_every,
        "auto",
        "PORTAL_CHECKPOINT_EVERY",
        "periodic checkpoints: auto, off or a duration",
    ),
    # Every this many checkpoints, one shares no chunk with those before it (a full copy): one
    # damaged chunk then reaches at most this many, and an intact restore point always exists.
    # A notice's checkpoint (it has a deadline) stays incremental; the next periodic one copies.
    _core(
        "checkpoint_independent_every",
        count,
        4,
        "PORTAL_CHECKPOINT_INDEPENDENT_EVERY",
        "every this many checkpoints, one is a full copy",
    ),
    # Off, an agent over `portal mcp` reads (jobs, status, explain, logs) and changes nothing.
    _core(
        "mcp.actions",
        boolean,
        False,
        "PORTAL_MCP_ACTIONS",
        "portal mcp's notice, resume and cancel tools (off: it only reads)",
    ),
)
_CORE = {spec.name: spec for spec in CORE_SETTINGS}


def _schema(plugins: Plugins | None) -> dict[str, SettingSpec]:
    """Portal's settings, then every plugin's (sorted); a plugin may not redeclare Portal's."""
    schema = dict(_CORE)
    if plugins is None:
        return schema
    for name, spec in sorted(plugins.settings().items()):
        if name in schema:
            raise PluginError(
                f"a plugin declares the setting {spec.name!r}, which is one of Portal's own; "
                "name a plugin's settings after the plugin (acme.poll_interval_s)",
                details={"setting": spec.name},
            )
        schema[name] = spec
    return schema


def _unknown(name: str, where: str, schema: Mapping[str, SettingSpec]) -> InvalidSettingError:
    return InvalidSettingError(
        f"unknown setting {name!r} in {where}; known settings: {', '.join(sorted(schema))}. "
        "Fix the name, remove it, or install the plugin that declares it",
        details={"setting": name, "origin": where},
    )


@attrs.frozen
class _Inputs:
    """What a :class:`Settings` was loaded from, to load it again with plugins' settings."""

    values: Mapping[str, Any]
    environ: Mapping[str, str] | None
    source: str
    project: Path | bool | None


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
    #: Each setting's parsed value, by the setting's name (``spot.move_when_over``): Portal's,
    #: and the plugins' when they were loaded with them (see :meth:`with_plugins`).
    values: Mapping[str, Any] = attrs.field(factory=dict, eq=False, repr=False)
    _inputs: _Inputs | None = attrs.field(default=None, eq=False, repr=False, alias="inputs")

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
        plugins: Plugins | bool | None = None,
    ) -> Settings:
        """Every layer merged (see the module), validated. ``values`` come from ``source``;
        ``project``: the directory whose ``portal.toml`` counts (True: the current one; False
        or None: none). ``plugins``' settings are resolved too; with None, the installed ones
        are loaded only when a layer names a setting that is not Portal's own; with False,
        only Portal's own are read and another key is left to the plugin that declares it (a
        library reading its store's URL in a job's process loads no plugin)."""
        env = os.environ if environ is None else environ
        given = dict(values or {})
        home_value = env.get("PORTAL_HOME") or given.get("home")
        home_path = _home(home_value)
        layers: list[Mapping[str, tuple[Any, str]]] = [read_settings_file(home_path / CONFIG_NAME)]
        directory = Path.cwd() if project is True else project or None
        if directory:
            layers.append(read_settings_file(Path(directory) / PROJECT_NAME))
        layers.append({k: (v, source) for k, v in given.items()})
        named = {name: where for layer in layers for name, (_, where) in layer.items()}
        if plugins is False:  # a file's other keys are its plugins' to check; a caller's are not
            named = {n: w for n, w in named.items() if n in _CORE or n in given}
        elif plugins is None and not named.keys() <= _CORE.keys():
            from portal.core.plugins import Plugins

            plugins = Plugins.load()
        schema = _schema(plugins if not isinstance(plugins, bool) else None)
        for name, where in named.items():
            if name not in schema:
                raise _unknown(name, where, schema)
        resolved: dict[str, Any] = {}
        origins: dict[str, str] = {}
        for name, spec in schema.items():
            raw, origin = spec.default, "default"
            for layer in layers:
                if name in layer:
                    raw, origin = layer[name]
            if spec.env and env.get(spec.env, "") != "":
                raw, origin = env[spec.env], f"environment variable {spec.env}"
            origins[name] = origin
            if raw is None:
                resolved[name] = None
                continue
            try:
                resolved[name] = spec.parse(raw)
            except (TypeError, ValueError) as why:
                shown = "a value (a secret, not shown)" if spec.secret else f"value {raw!r}"
                raise InvalidSettingError(
                    f"setting {name} has {shown} (from {origin}): {why}. Fix it there, "
                    f"or remove it to use the default ({spec.default!r})",
                    details={
                        "setting": name,
                        "origin": origin,
                        **({} if spec.secret else {"value": str(raw)}),
                    },
                ) from None
        home = _home(resolved["home"])
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
            values=resolved,
            inputs=_Inputs(values=given, environ=environ, source=source, project=project),
        )

    def with_plugins(self, plugins: Plugins) -> Settings:
        """These settings loaded again from the same layers, with ``plugins``' settings too
        (what a node hands its notice sources)."""
        inputs = self._inputs or _Inputs(
            values={"home": str(self.home)}, environ=None, source="settings", project=True
        )
        return Settings.load(
            inputs.values,
            environ=inputs.environ,
            source=inputs.source,
            project=inputs.project,
            plugins=plugins,
        )

    def explain(self) -> list[tuple[str, Any, str]]:
        """Each setting's effective value and the layer it came from, by name."""
        return [
            (name, value, self.origins.get(name, "default")) for name, value in self.values.items()
        ]


def secret_settings(plugins: Plugins | None = None) -> frozenset[str]:
    """The settings whose values are secrets (``SettingSpec.secret``): never printed."""
    return frozenset(name for name, spec in _schema(plugins).items() if spec.secret)


def setting_names(plugins: Plugins | None = None) -> list[str]:
    """Every setting's name, as files and ``portal config`` spell them (with ``plugins``')."""
    return sorted(_schema(plugins))


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

    Refuses, naming the file: a file that cannot be read, is not UTF-8, or is not TOML. Whether
    each key is a setting is :meth:`Settings.load`'s to say (plugins declare settings too)."""
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
    import tomllib  # here: most commands find no settings file, and tomllib costs 2 ms

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
        found[name] = (value, f"{path} line {line}" if line else str(path))
    return found
