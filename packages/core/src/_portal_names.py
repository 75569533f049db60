"""The first step of the ``portal`` and ``bladekit`` commands, outside the ``portal`` namespace.

The names ``portal`` and ``bladekit`` on the package index are other projects' (a
distributed-systems library and Blade's SDK), and each owns the same import name as ours. One
installed beside Portal takes that name: a ``portal/__init__.py`` turns Portal's namespace into
another project's package (its code runs first; with editable installs ours is not found at all),
and another ``bladekit`` replaces the SDK. Python would say ``No module named 'portal.cli'``, or
nothing. This module lives outside the namespace so that it still runs then, and says which
distribution took the name and how to remove it. It ships with portal-spot-core, which every
Portal distribution with a command depends on; each command's own start module
(``_portal_spot``, ``_portal_bladekit``) calls it before importing anything of ours.

The check costs two import-system lookups and one small read on every start (``portal --help``
stays fast); the distribution's name is looked up only when something is wrong.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["EXIT_PORTAL", "foreign_packages", "portal_is_foreign"]

#: Ours, by distribution name: never reported as the intruder.
_OURS_PREFIX = "portal-"
#: Written in our ``bladekit/__init__.py``: a module without it is another project's SDK.
_BLADEKIT_MARK = b"portal-bladekit"
#: Exit status when Portal cannot run at all (as for any failure of Portal itself).
EXIT_PORTAL = 69


def _owners(name: str) -> list[str]:
    """The installed distributions, other than Portal's, that ship ``name/__init__.py``."""
    from importlib import metadata

    found: list[str] = []
    for dist in metadata.distributions():
        dist_name = dist.metadata["Name"] or ""
        if dist_name.lower().startswith(_OURS_PREFIX):
            continue
        files = dist.files or ()
        if any(str(f).replace("\\", "/") == f"{name}/__init__.py" for f in files):
            found.append(f"{dist_name} {dist.version}")
    return sorted(set(found))


def _ours_installed(distribution: str) -> bool:
    from importlib import metadata

    try:
        metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True


def portal_is_foreign() -> bool:
    """Portal's ``portal`` is a namespace package: one with an ``__init__.py`` is another's."""
    spec = importlib.util.find_spec("portal")
    return spec is not None and spec.origin is not None and spec.origin != "namespace"


def _bladekit_is_foreign() -> bool:
    """Another ``bladekit`` matters only where ours is installed too (Portal runs without it)."""
    spec = importlib.util.find_spec("bladekit")
    if spec is None or spec.origin is None:
        return False
    try:
        head = Path(spec.origin).read_bytes()[:4096]
    except OSError:
        return False
    return _BLADEKIT_MARK not in head and _ours_installed("portal-bladekit")


def _portal_distribution() -> str:
    """Ours that a user reinstalls: the command's distribution, else the core bladekit runs on."""
    return "portal-spot" if _ours_installed("portal-spot") else "portal-spot-core"


def foreign_packages() -> list[str]:
    """One sentence per import name another project has taken from Portal (none: ``[]``)."""
    problems: list[str] = []
    # Ours is named only once something is wrong: the lookup imports importlib.metadata, which
    # every start would otherwise pay for.
    for name, which_is_ours, foreign in (
        ("portal", _portal_distribution, portal_is_foreign),
        ("bladekit", lambda: "portal-bladekit", _bladekit_is_foreign),
    ):
        if not foreign():
            continue
        ours = which_is_ours()
        owners = _owners(name)
        where = importlib.util.find_spec(name)
        origin = where.origin if where is not None else "?"
        remove = (
            f"`pip uninstall {owners[0].split()[0]}`"
            if owners
            else "delete that folder or take it off PYTHONPATH"
        )
        problems.append(
            f"the import name `{name}` belongs to another project here "
            f"({', '.join(owners) or 'not an installed distribution'}, at {origin}), not to "
            f"Portal's {ours}: the names `portal` and `bladekit` on the package index are other "
            f"projects'. Remove it ({remove}) or keep Portal in a virtual environment of its own, "
            f"then reinstall {ours} (`pip install --force-reinstall {ours}`) [FOREIGN_PACKAGE]"
        )
    return problems
