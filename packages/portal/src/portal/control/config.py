"""Which control-plane service this machine talks to: the settings ``control_plane``,
``control_token`` and ``control_ca``.

``PORTAL_CONTROL_PLANE`` and ``PORTAL_TOKEN`` win; without them ``PORTAL_HOME/config.toml`` may
name the service once for every shell (``control_plane = "http://host:8471"`` and
``control_token = "..."``), as any setting. Neither set: the control plane is this machine's own
store. Kept here, beside the one place that opens a store (``select.py``).
"""

from __future__ import annotations

import attrs

from portal.core.settings import CONFIG_NAME, Settings

__all__ = ["CONFIG_NAME", "RemoteControl", "remote_control"]


@attrs.frozen
class RemoteControl:
    """A control-plane service's address and this user's token for it."""

    url: str
    token: str | None = attrs.field(default=None, repr=False)  # a secret: kept out of logs
    #: The CA certificate file an https:// service's certificate is checked against (None: the
    #: system's trusted CAs).
    ca_file: str | None = None


def remote_control(settings: Settings) -> RemoteControl | None:
    """The service the settings name (the environment, or ``PORTAL_HOME/config.toml`` or a
    project's ``portal.toml``: see :mod:`portal.core.settings`), or None."""
    url, token = settings.control_plane, settings.control_token
    return None if url is None else RemoteControl(url, token, settings.control_ca)
