"""bladekit's runs in ``portal jobs``, the console and the MCP server: a Portal plugin (entry
point ``bladekit`` in the ``portal`` group) answering ``portal_job_listings``.

Each run becomes a row of ``portal jobs --json`` (docs/cli-json.md) with ``source``
``bladekit``: its run id as the job, ``app.function`` as the name, its attempts, its
preemptions as recoveries (each was resumed from the run's checkpoints) and the last checkpoint
``save_checkpoint`` wrote. A run that ran out of preemptions (``max_interruptions``) is
``failed`` in Portal's words. Read from the run folders alone (:mod:`bladekit.listing`): listing
costs a few small reads per run and imports nothing of the runner.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from portal.core.hookspecs import hookimpl

__all__ = ["portal_job_listings", "row_of"]

#: bladekit's run states in Portal's job states.
_STATES = {"running": "running", "done": "done", "failed": "failed", "preempted-out": "failed"}


def row_of(run: Any, now: float) -> dict[str, Any]:
    """A :class:`bladekit.listing.RunRow` as a row of ``portal jobs --json``."""
    end = run.ended_at if run.ended_at is not None else now
    checkpoint = None
    if run.checkpoint_at is not None:
        checkpoint = {"id": None, "bytes": run.checkpoint_bytes, "created_at": run.checkpoint_at}
    return {
        "job": run.run_id,
        "name": f"{run.app}.{run.function}",
        "state": _STATES.get(run.state, str(run.state)),
        "script": f"bladekit {run.app}::{run.function}",
        "created_at": run.submitted_at,
        "started_at": run.submitted_at,
        "ended_at": run.ended_at,
        "duration_s": max(0.0, end - run.submitted_at),
        "attempts": run.attempts,
        "recoveries": run.interruptions,
        "machine": "local",
        "last_checkpoint": checkpoint,
        "carry": None,
        "source": "bladekit",
    }


@hookimpl
def portal_job_listings(home: str) -> list[dict[str, Any]]:
    from bladekit.listing import runs

    now = time.time()
    return [row_of(run, now) for run in runs(Path(home))]
