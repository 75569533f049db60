"""Portal's core: plugin hooks, domain objects, wire formats, errors with stable codes, a clock.

Importing this package is light on purpose (no cloud SDKs, no torch, no numpy): the names below are
loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "PortalError": "portal.core.errors",
    "RunError": "portal.core.errors",
    "PreemptedError": "portal.core.errors",
    "InvalidArgumentError": "portal.core.errors",
    "PluginError": "portal.core.errors",
    "get_plugin_manager": "portal.core.plugins",
    "Plugins": "portal.core.plugins",
    "hookimpl": "portal.core.hookspecs",
}

__all__ = [
    "InvalidArgumentError",
    "PluginError",
    "Plugins",
    "PortalError",
    "PreemptedError",
    "RunError",
    "__version__",
    "get_plugin_manager",
    "hookimpl",
]

if TYPE_CHECKING:
    from portal.core.errors import (
        InvalidArgumentError,
        PluginError,
        PortalError,
        PreemptedError,
        RunError,
    )
    from portal.core.hookspecs import hookimpl
    from portal.core.plugins import Plugins, get_plugin_manager


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'portal.core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
