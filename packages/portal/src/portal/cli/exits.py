"""What every ``portal`` command shares for its end: the exit statuses and Portal's notes."""

from __future__ import annotations

import sys

__all__ = ["EXIT_PORTAL", "EXIT_SOFTWARE", "EXIT_SUSPENDED", "EXIT_USAGE", "note"]

EXIT_SUSPENDED = 75
EXIT_USAGE = 64
EXIT_PORTAL = 69
EXIT_SOFTWARE = 70  # EX_SOFTWARE: a bug in Portal itself


def note(text: str) -> None:
    """One of Portal's own notes: to stderr, prefixed ``portal:``."""
    print(f"portal: {text}", file=sys.stderr, flush=True)
