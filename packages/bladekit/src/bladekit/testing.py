"""Helpers to preempt bladekit containers without a CLI (tests, demos, other processes).

In the caller's process, ``instance.run.preempt(seconds)`` or ``call.run.preempt(seconds)``
delivers a notice directly. From anywhere else on the machine, :func:`preempt_run` finds the run's
current attempt by id under ``PORTAL_HOME`` and drops a notice into its notice folder with
portal-spot-core's :func:`~portal.providers.local.deliver_notice`, exactly what
``portal notice`` does for a job.
"""

from __future__ import annotations

import logging
from pathlib import Path

from bladekit.listing import run_row
from bladekit.runner import DEFAULT_GRACE_S, find_run_dir, grace_seconds
from bladekit.wire import decode_request
from portal.core.domain import Notice
from portal.core.errors import InvalidArgumentError
from portal.providers.local import deliver_notice

__all__ = ["notice_dir", "preempt_run"]

log = logging.getLogger("bladekit.testing")


def notice_dir(run_id: str, *, home: Path | None = None) -> Path:
    """The notice folder of run ``run_id``'s current attempt."""
    folder = find_run_dir(run_id, home=home)
    try:
        attempt = (folder / "current_attempt").read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise InvalidArgumentError(
            f"run {run_id} has no running container under {folder.parent}: check the run id and "
            "PORTAL_HOME, and that the run made its first call",
            details={"run_id": run_id},
        ) from None
    return folder / "attempts" / attempt / "notices"


def preempt_run(
    run_id: str, seconds: float = DEFAULT_GRACE_S, *, home: Path | None = None
) -> Notice | None:
    """Preempt run ``run_id``'s current container, giving it ``seconds`` of grace.

    Returns the notice, or None (with a log line) for a ``gpu_class="reserved"`` run, which is
    never preempted. Raises :class:`~portal.core.errors.InvalidArgumentError` for a grace window
    that is not a finite number above 0, and for a run that has ended (nothing is sent: its last
    attempt's folder is its record, not a machine to preempt).
    """
    seconds = grace_seconds(seconds)
    folder = find_run_dir(run_id, home=home)
    request = decode_request((folder / "request.json").read_bytes())
    row = run_row(folder)
    if row is not None and row.state != "running":
        why = f": {row.reason}" if row.reason else ""
        raise InvalidArgumentError(
            f"run {run_id} ({request.function}) has already ended (state {row.state}{why}), so "
            "nothing was sent: a preemption notice goes to a running run. Start the function "
            "again (bladekit run prints the new run's id)",
            details={"run_id": run_id, "state": row.state},
        )
    if request.gpu_class != "spot":
        # The None returned says it; the log line is for callers that do not look.
        log.info(
            "run %s (%s) runs on gpu_class=%r capacity, which is never preempted: notice refused",
            run_id,
            request.function,
            request.gpu_class,
        )
        return None
    return deliver_notice(notice_dir(run_id, home=home), seconds=seconds, reason="bladekit.testing")
