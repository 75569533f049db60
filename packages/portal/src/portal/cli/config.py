"""``portal config show`` and ``portal config set KEY VALUE``: the settings as they stand.

Every setting comes from one stack of layers (:mod:`portal.core.settings`), Portal's own and those
the installed plugins declare (``portal_settings``): ``show`` prints each
effective value and the layer it came from; ``set`` validates a value as the settings will read
it, then writes it to ``PORTAL_HOME/config.toml`` (or, with ``--project``, to ``portal.toml`` in
this directory). A file is rewritten whole by ``set``: comments in it are not kept.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from portal.core.errors import InvalidArgumentError, InvalidSettingError
from portal.core.plugins import Plugins
from portal.core.settings import (
    CONFIG_NAME,
    PROJECT_NAME,
    Settings,
    secret_settings,
    setting_names,
)

__all__ = ["config_command"]

_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def config_command(options: argparse.Namespace) -> int:
    if options.action == "show":
        return _show(options)
    return _set(options)


def _shown(name: str, value: Any, secrets: frozenset[str]) -> Any:
    """A secret setting's value as set or not, never printed."""
    if name in secrets and value is not None:
        return "(set)"
    return str(value) if isinstance(value, Path) else value


def _show(options: argparse.Namespace) -> int:
    plugins = Plugins.load()
    settings = Settings.load(plugins=plugins)
    secrets = secret_settings(plugins)
    rows = [(n, _shown(n, value, secrets), origin) for n, value, origin in settings.explain()]
    effective = {"home": str(settings.home), "storage_url": settings.storage_url}
    rows = [(n, effective.get(n, v) if v is None else v, o) for n, v, o in rows]
    if options.json:
        print(json.dumps([{"setting": n, "value": v, "from": o} for n, v, o in rows], indent=2))
        return 0
    table = [("SETTING", "VALUE", "FROM")] + [(n, _text(n, v), o) for n, v, o in rows]
    widths = [max(len(r[i]) for r in table) for i in range(2)]
    for name, value, origin in table:
        print(f"{name.ljust(widths[0])}  {value.ljust(widths[1])}  {origin}".rstrip())
    return 0


def _text(name: str, value: Any) -> str:
    """A value as a person reads it: durations in seconds, ``auto``/``off`` by name."""
    if name == "checkpoint_every":
        return "auto" if value is None else "off" if value == 0 else f"{value:g} s"
    if value is None:
        return "-"
    if isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _typed(text: str, parsed: Any) -> Any:
    """What to write for ``text``: TOML's own boolean or number where the setting reads one,
    else the text as given (a duration such as ``10m`` stays as written)."""
    if isinstance(parsed, bool):
        return parsed
    if _NUMBER.fullmatch(text.strip()):
        number = float(text)
        return int(number) if number.is_integer() and "." not in text else number
    return text


def _set(options: argparse.Namespace) -> int:
    name, text = options.key, options.value
    plugins = Plugins.load()
    known = setting_names(plugins)
    if name not in known:
        raise InvalidArgumentError(
            f"unknown setting {name!r}; known settings: {', '.join(known)}. Fix the name, or "
            "install the plugin that declares it"
        )
    if name == "home":
        raise InvalidArgumentError(
            "home is where config.toml lives, so it cannot be set in it: set the environment "
            "variable PORTAL_HOME"
        )
    # The files as they are now, and the value as they will read it; of the environment only
    # PORTAL_HOME counts (it says where config.toml is).
    home_only = {k: v for k, v in os.environ.items() if k == "PORTAL_HOME"}
    settings = Settings.load(environ=home_only, plugins=plugins)
    target = Path.cwd() / PROJECT_NAME if options.project else settings.home / CONFIG_NAME
    checked = Settings.load(
        {name: text}, environ=home_only, source="the command line", plugins=plugins
    )
    value = _typed(text, checked.values[name])
    data: dict[str, Any] = {}
    if target.exists():
        data = tomllib.loads(target.read_text(encoding="utf-8"))
    table = data
    *parents, last = name.split(".")
    for part in parents:
        table = table.setdefault(part, {})
        if not isinstance(table, dict):
            raise InvalidSettingError(f"{target}: {part} is not a table; fix the file")
    table[last] = value
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(tomli_w.dumps(data), encoding="utf-8")
    secrets = secret_settings(plugins)
    if name in secrets:
        tmp.chmod(0o600)
    tmp.replace(target)
    shown = _shown(name, value, secrets)
    print(f"{name} = {json.dumps(shown) if not isinstance(shown, str) else shown} in {target}")
    effective = Settings.load(plugins=plugins).origins.get(name, "")
    if not effective.startswith(str(target)):
        print(f"portal: note: {name} comes from {effective} here, which wins over {target}")
    return 0
