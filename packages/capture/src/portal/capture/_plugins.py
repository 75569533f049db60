"""The engine's one door to portal-spot-core's plugins: serializer reducers and capture extensions.

Everything else in the engine takes these as plain arguments (a dict of reducers, a list of
extensions), so it is testable without a plugin manager. If portal-spot-core is not importable (a
bare checkout), the engine runs with no extra reducers and no extensions.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from portal.capture.snapshot import CaptureExtension

__all__ = ["load_capture_extensions", "load_reducers"]

Reducer = Callable[[Any], Any]


@functools.cache
def _plugins() -> Any | None:
    try:
        from portal.core.plugins import Plugins
    except ImportError:
        return None
    return Plugins.load()


def load_reducers(plugins: Any | None = None) -> dict[str, Reducer]:
    """Reducers by fully qualified type name, from every ``portal_serializers`` plugin."""
    plugins = plugins if plugins is not None else _plugins()
    if plugins is None:
        return {}
    reducers: dict[str, Reducer] = {}
    for spec in plugins.serializers().values():
        reducers.update(spec.reducers)
    return reducers


def load_capture_extensions(plugins: Any | None = None) -> list[CaptureExtension]:
    """Every registered capture extension; the engine calls one only if the modules it names are
    loaded at checkpoint time (torch support costs nothing to a program without torch)."""
    plugins = plugins if plugins is not None else _plugins()
    if plugins is None:
        return []
    return list(plugins.capture_extensions().values())
