"""Which of portal-console's extras brings which module, and the refusal when one is missing.

``pip install portal-console`` installs neither command's stack: ``[web]`` brings
``portal console``'s (Starlette, uvicorn, and leather for the charts), ``[mcp]`` brings
``portal mcp``'s. A module that imports one of them imports it inside ``try``, and a missing one
becomes a usage error naming the extra to install, never a traceback or "a bug in Portal".
"""

from __future__ import annotations

import importlib.util

from portal.core.errors import InvalidArgumentError

__all__ = ["EXTRA_MODULES", "refuse_without_extra"]

#: Each extra's top-level modules, as ``[project.optional-dependencies]`` in pyproject.toml
#: installs them (the tests check the two agree).
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "web": ("starlette", "uvicorn", "leather"),
    "mcp": ("mcp",),
}

_COMMANDS = {"web": "portal console", "mcp": "portal mcp"}


def refuse_without_extra(extra: str, exc: ImportError) -> None:
    """Raise the refusal that names ``extra`` when ``exc`` failed to import one of its modules;
    return otherwise, so the caller re-raises ``exc`` (then it is a bug of ours, and shown so).
    """
    module = (exc.name or "").partition(".")[0]
    if module not in EXTRA_MODULES[extra]:
        return
    command, install = _COMMANDS[extra], f"'portal-console[{extra}]'"
    if not _installed(module):
        raise InvalidArgumentError(
            f"`{command}` needs portal-console's {extra} extra ({module} is not installed): "
            f"install it with `pip install {install}`"
        ) from None
    # Installed, but not a version this package can use (a module or name it needs is not in it).
    raise InvalidArgumentError(
        f"`{command}` needs portal-console's {extra} extra ({module} is installed, but not a "
        f"version it can use: {exc}): update it with `pip install --upgrade {install}`"
    ) from None


def _installed(module: str) -> bool:
    """Whether ``module`` is there to import at all (one that is may still be too old)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
