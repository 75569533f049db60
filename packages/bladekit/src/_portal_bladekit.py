"""The ``bladekit`` command's first step, outside the ``bladekit`` and ``portal`` names.

``bladekit`` on the package index is another project (Blade's SDK) with the same import name,
and ``portal`` is one too. Either installed here takes the name from Portal's, and the command
would end in ``No module named 'bladekit.cli'`` (or run the other project's code). This module
is found whatever owns those names; it names the intruder and the way out
(:mod:`_portal_names`, shared with the ``portal`` command) before importing the SDK.
"""

from __future__ import annotations

import sys

from _portal_names import EXIT_PORTAL, foreign_packages

__all__ = ["entry"]


def entry() -> None:
    """``[project.scripts] bladekit``: check the import names, then :func:`bladekit.cli.main`.

    bladekit needs both names (it runs on ``portal.core``), so either taken stops it here."""
    problems = foreign_packages()
    for problem in problems:
        print(f"bladekit: {problem}", file=sys.stderr)
    if problems:
        raise SystemExit(EXIT_PORTAL)
    try:
        from bladekit.cli import main
    except ImportError as exc:
        print(
            f"bladekit: bladekit's command line cannot be imported ({exc}); reinstall it "
            "(`pip install --force-reinstall portal-bladekit`) [INTERNAL]",
            file=sys.stderr,
        )
        raise SystemExit(EXIT_PORTAL) from None
    raise SystemExit(main())


if __name__ == "__main__":
    entry()
