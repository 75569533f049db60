"""Which control-plane service this machine talks to: the environment, else ``config.toml``.

``PORTAL_CONTROL_PLANE`` and ``PORTAL_TOKEN`` win; without them ``PORTAL_HOME/config.toml`` may
name the service once for every shell (``control_plane = "http://host:8471"`` and
``control_token = "..."``). Neither set: the control plane is this machine's own store.
Kept here, beside the one place that opens a store (``select.py``), not in the core's settings.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import attrs

from portal.core.errors import InvalidSettingError
from portal.core.settings import Settings

__all__ = ["CONFIG_NAME", "RemoteControl", "remote_control"]

CONFIG_NAME = "config.toml"
_KEYS = ("control_plane", "control_token")


@attrs.frozen
class RemoteControl:
    """A control-plane service's address and this user's token for it."""

    url: str
    token: str | None = attrs.field(default=None, repr=False)  # a secret: kept out of logs


def remote_control(settings: Settings) -> RemoteControl | None:
    """The service ``settings`` (the environment) or ``PORTAL_HOME/config.toml`` names, or None."""
    url, token = settings.control_plane, settings.control_token
    if url is None or token is None:
        file_url, file_token = _read_config(settings.home / CONFIG_NAME)
        url, token = url or file_url, token or file_token
    return None if url is None else RemoteControl(url, token)


def _read_config(path: Path) -> tuple[str | None, str | None]:
    """The control-plane keys of ``path`` (other keys are other tools' business), validated as
    settings are, with the file named in any refusal."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, None
    except OSError as why:
        raise InvalidSettingError(
            f"cannot read {path} ({why.strerror}): fix its permissions, or remove it",
            details={"file": str(path)},
        ) from None
    except UnicodeDecodeError:
        raise InvalidSettingError(
            f"{path} is not text (not UTF-8): a config.toml holds TOML; fix it, or remove it",
            details={"file": str(path)},
        ) from None
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as why:
        raise InvalidSettingError(
            f"{path} is not valid TOML ({why}): fix it, or remove it",
            details={"file": str(path)},
        ) from None
    wanted = {k: data[k] for k in _KEYS if k in data}
    if not wanted:
        return None, None
    checked = Settings.load(wanted, environ={}, source=str(path))
    return checked.control_plane, checked.control_token
