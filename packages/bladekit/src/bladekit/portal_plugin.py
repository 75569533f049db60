"""bladekit's runs in ``portal jobs``, the console and the MCP server: a Portal plugin (entry
point ``bladekit`` in the ``portal`` group) answering ``portal_job_listings``.

Each run becomes a row of ``portal jobs --json`` (docs/cli-json.md) with ``source``
``bladekit``: its run id as the job, ``app.function`` (``app.Class.method``) as the name, its
attempts, as recoveries the attempts that resumed from a checkpoint (``load_checkpoint`` loaded
one; attempt 1 never does) and the last checkpoint ``save_checkpoint`` wrote. Portal's job states
have no word for a run that ran out of preemptions (``max_interruptions``): it is ``failed``, and
the row's ``error`` (as in ``portal status --json``) says why, as it does for every failed run.
Read from the run folders alone (:mod:`bladekit.listing`): listing costs a few small reads per run
and imports nothing of the runner.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from portal.core.hookspecs import hookimpl

if TYPE_CHECKING:
    from bladekit.listing import RunRow

__all__ = ["portal_job_listings", "row_of"]

#: bladekit's run states in Portal's job states.
_STATES = {"running": "running", "done": "done", "failed": "failed", "preempted-out": "failed"}


def row_of(run: RunRow, now: float) -> dict[str, Any]:
    """A :class:`bladekit.listing.RunRow` as a row of ``portal jobs --json``."""
    end = run.ended_at if run.ended_at is not None else now
    what = run.function if run.method is None else f"{run.function}.{run.method}"
    checkpoint = None
    if run.checkpoint_at is not None:
        checkpoint = {"id": None, "bytes": run.checkpoint_bytes, "created_at": run.checkpoint_at}
    return {
        "job": run.run_id,
        "name": f"{run.app}.{what}",
        "state": _STATES.get(run.state, str(run.state)),
        "script": f"bladekit {run.app}::{what}",
        "created_at": run.submitted_at,
        "started_at": run.submitted_at,
        "ended_at": run.ended_at,
        "duration_s": max(0.0, end - run.submitted_at),
        "attempts": run.attempts,
        "recoveries": run.resumed,
        "machine": "local",
        "last_checkpoint": checkpoint,
        "carry": None,
        "source": "bladekit",
        "error": _error(run),
    }


def _error(run: RunRow) -> str | None:
    """Why a failed run failed, for the row's ``error``; None unless it failed."""
    if _STATES.get(run.state) != "failed":
        return None
    if run.state == "preempted-out":
        return (
            f"preempted-out: {run.reason or 'preempted more times than max_interruptions allows'}"
        )
    return run.reason


@hookimpl
def portal_job_listings(home: str) -> list[dict[str, Any]]:
    from bladekit.listing import runs

    now = time.time()
    return [row_of(run, now) for run in runs(Path(home))]
