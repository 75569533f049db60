"""The jobs list's rows: ``portal jobs``' rows (:meth:`JobViews.jobs`) and, for a reader at a
glance, how long ago each job was submitted and how long it has run.

Both are worded by :mod:`portal.core.units`, as every message words them ("Checkpoint check:
passed 3 minutes ago" on the run page; ``1h30m`` as ``portal jobs`` writes a duration).
"""

from __future__ import annotations

from typing import Any

from portal.control.views import JobViews, job_row_words
from portal.core import units

__all__ = ["job_rows"]


def job_rows(views: JobViews, now: float) -> list[dict[str, Any]]:
    """Every job (``portal jobs --json``'s fields), with ``submitted`` ("3 minutes ago"; its
    clock time as ``submitted_at``), ``duration`` (``12m30s``: from its first start to its end,
    or to now while it runs; None before any attempt started), and ``attempts_text`` and
    ``last_checkpoint_text`` worded as ``portal jobs`` words them."""
    rows = views.jobs()
    for row in rows:
        words = job_row_words(row, now)
        row["submitted"] = units.ago(now - float(row["created_at"]))
        row["submitted_at"] = units.clock(float(row["created_at"]))
        seconds = row["duration_s"]
        row["duration"] = None if seconds is None else units.duration(float(seconds))
        row["attempts_text"] = words["attempts"]
        row["last_checkpoint_text"] = words["last_checkpoint"]
    return rows
