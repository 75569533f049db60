"""How every message writes a quantity: byte sizes, rates and clock times, one way each.

An event, a plan line and a status line about one state must agree to the letter ("12.0 GB" in
the one is "12.0 GB" in the others), so every wording module formats through these, and a test
that reads one message can compare it with another.
"""

from __future__ import annotations

import time

__all__ = ["age", "ago", "clock", "duration", "rate", "size"]

_UNITS = ("B", "kB", "MB", "GB", "TB", "PB")


def size(n_bytes: float) -> str:
    """Bytes in powers of 1000, as the spec writes them: ``512 B``, ``15.3 kB``, ``512.0 MB``,
    ``12.0 GB``; one decimal from kB up, so that two sizes of one kind compare at a glance."""
    n = float(n_bytes)
    for unit in _UNITS:
        if abs(n) < 999.95 or unit == _UNITS[-1]:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def rate(bytes_per_s: float) -> str:
    """``25.0 MB/s``."""
    return f"{size(bytes_per_s)}/s"


def clock(at: float) -> str:
    """A moment as ``14:05:03 UTC``: the node, the control plane and the user may be in three
    time zones, and a deadline must read the same on each of them."""
    return time.strftime("%H:%M:%S UTC", time.gmtime(at))


def age(seconds: float) -> str:
    """How long ago, in one unit: ``45s``, ``12m``, ``3h``, ``2d`` (a table's column, where a
    second unit would only make the rows harder to compare)."""
    for unit, span in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= span:
            return f"{int(seconds // span)}{unit}"
    return f"{max(0, int(seconds))}s"


def ago(seconds: float) -> str:
    """How long ago, in words for a sentence: ``less than a minute ago``, ``12 minutes ago``,
    ``3 hours ago``."""
    minutes = int(max(0.0, seconds) // 60)
    if minutes < 1:
        return "less than a minute ago"
    if minutes < 120:
        return f"{minutes} minute{'s' if minutes != 1 else ''} ago"
    return f"{minutes // 60} hours ago"


def duration(seconds: float) -> str:
    """How long, in at most two units: ``45s``, ``12m30s``, ``1h30m``, ``2d3h`` (the form
    ``--checkpoint-every`` and ``portal server token create --expires`` read back)."""
    whole = max(0, int(seconds))
    parts: list[str] = []
    for unit, span in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        if whole >= span or (unit == "s" and not parts):
            parts.append(f"{whole // span}{unit}")
            whole %= span
        if len(parts) == 2:
            break
    return "".join(parts)
