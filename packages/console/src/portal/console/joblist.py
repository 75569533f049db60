"""The jobs list's rows: ``portal jobs``' rows (:meth:`JobViews.jobs`) and, for a reader at a
glance, how long ago each job was submitted and how long it has run.

Both are worded by :mod:`portal.core.units`, as every message words them ("Checkpoint check:
passed 3 minutes ago" on the run page; ``1h30m`` as ``portal jobs`` writes a duration).
"""

from __future__ import annotations

from typing import Any

from portal.control.views import JobViews
from portal.core import units

__all__ = ["job_rows"]


def job_rows(views: JobViews, now: float) -> list[dict[str, Any]]:
    """Every job (``portal jobs --json``'s fields), with ``submitted`` ("3 minutes ago") and
    ``duration`` (``12m30s``: from its first start to its end, or to now while it runs; None
    before any attempt started)."""
    rows = views.jobs()
    for row in rows:
        row["submitted"] = units.ago(now - float(row["created_at"]))
        seconds = row["duration_s"]
        row["duration"] = None if seconds is None else units.duration(float(seconds))
    return rows
