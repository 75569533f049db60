"""The ``portal`` command's first step, outside the ``portal`` namespace: another project's
``portal`` or ``bladekit`` that took the import name is named, with the way out (see
:mod:`_portal_names`), before anything of Portal's is imported."""

from __future__ import annotations

import sys

from _portal_names import EXIT_PORTAL, foreign_packages, portal_is_foreign

__all__ = ["main"]


def main() -> int:
    """Check the import names, then hand over to :func:`portal.cli.main.main`."""
    problems = foreign_packages()
    for problem in problems:
        print(f"portal: {problem}", file=sys.stderr)
    if problems and portal_is_foreign():
        return EXIT_PORTAL  # importing on would run the other project's code, or fail
    try:
        from portal.cli.main import main as portal_main
    except ImportError as exc:
        if not problems:  # Portal itself is broken: no one else to name
            print(
                f"portal: Portal's command line cannot be imported ({exc}); reinstall it "
                "(`pip install --force-reinstall portal-spot`) [INTERNAL]",
                file=sys.stderr,
            )
        return EXIT_PORTAL
    return portal_main()


if __name__ == "__main__":
    raise SystemExit(main())
