"""Is the node of a job's latest attempt still alive on this machine?

On one machine Portal can know for certain: the node writes its pid, and its job process dies
with it (``PR_SET_PDEATHSIG``). A dead node with an attempt still marked running is reconciled:
the attempt is recorded as lost, and the job keeps its state — suspended at its last complete
checkpoint (a partial upload is never chosen and stays for inspection), or failed if it never
completed one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from portal.control.plane import ControlPlane
from portal.core.domain import AttemptState, Job, JobState

__all__ = ["node_alive", "reconcile", "write_node_pid"]


def write_node_pid(path: Path) -> None:
    """Atomically, so a reader never sees an empty file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(str(os.getpid()))
    tmp.replace(path)


def node_alive(pid_file: Path) -> bool | None:
    """True/False when known; None while the node has not written its pid yet."""
    try:
        pid = int(pid_file.read_text())
    except (FileNotFoundError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"portal.node" in cmdline


def reconcile(plane: ControlPlane, job: Job, latest_checkpoint: Any | None) -> Job:
    """Settle a job whose node died; returns the job as it now is."""
    if job.state not in (JobState.RUNNING, JobState.PAUSING):
        return job
    attempts = plane.store.attempts(job.id)
    if not attempts or attempts[-1].state is not AttemptState.RUNNING:
        return job
    attempt = attempts[-1]
    pid_file = plane.paths(job.id).attempt(attempt.number) / "node.pid"
    if node_alive(pid_file) is not False:
        return job
    now = plane.clock.now()
    plane.store.end_attempt(job.id, attempt.number, state=AttemptState.LOST, at=now, exit_code=None)
    if latest_checkpoint is not None:
        plane.record(
            job.id,
            "node-died",
            f"the node of attempt {attempt.number} stopped without reporting (its job process "
            f"stopped with it); the job keeps its state: checkpoint "
            f"{latest_checkpoint.checkpoint_id}, the last complete one; resume with "
            f"`portal resume {job.name or job.id}`",
            checkpoint=latest_checkpoint.checkpoint_id,
        )
        return plane.set_state(job.id, JobState.SUSPENDED)
    plane.record(
        job.id,
        "node-died",
        f"the node of attempt {attempt.number} stopped without reporting before any checkpoint "
        f"was complete; run the script again with `portal run`",
    )
    return plane.set_state(job.id, JobState.FAILED)
