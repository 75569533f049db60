"""Is the node of a job's latest attempt still alive on this machine?

On one machine Portal can know for certain: the node writes its pid, and its job process dies
with it (``PR_SET_PDEATHSIG``). A dead node with an attempt still marked running is reconciled:
the attempt is recorded as lost, and the job keeps its state — suspended at its last complete
checkpoint (a partial upload is never chosen and stays for inspection), or failed if it never
completed one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from portal.control.backlog import BACKLOG_NAME, replay_file
from portal.control.plane import ControlPlane
from portal.core.domain import AttemptState, Job, JobState
from portal.providers.local import withdraw_notice

log = logging.getLogger("portal.control")

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


def _replay_backlog(plane: ControlPlane, job: Job, attempt: int) -> Job:
    """Record what a dead node kept in its journal while the control plane was unreachable."""
    path = plane.paths(job.id).attempt(attempt) / BACKLOG_NAME
    try:
        replayed = replay_file(plane, job.id, path)
    except Exception as exc:  # the rest stays in the file for the next reader
        log.warning("the backlog %s could not be recorded yet: %s", path, exc)
        return job
    if replayed:
        plane.record(
            job.id,
            "reported-late",
            f"the node of attempt {attempt} stopped with {replayed} report(s) it could not "
            "deliver; they are recorded now, with their own times",
            kept=replayed,
        )
        return plane.job(job.id)
    return job


def _withdraw_notices(directory: Path) -> None:
    """The notices delivered to a machine that is gone with its attempt: the next attempt runs
    on another machine and must not take them as its own."""
    for path in directory.glob("*.json"):
        withdraw_notice(directory, path.stem)


def reconcile(
    plane: ControlPlane,
    job: Job,
    latest_checkpoint: Any | None,
    *,
    incomplete: Callable[[], Sequence[str]] | None = None,
) -> Job:
    """Settle a job whose node died; returns the job as it now is.

    ``incomplete``: the ids of the job's incomplete checkpoints (an upload the node's death cut
    short), named in the event as not resumable and kept for inspection.
    """
    if job.state not in (JobState.RUNNING, JobState.PAUSING):
        return job
    attempts = plane.store.attempts(job.id)
    if not attempts or attempts[-1].state is not AttemptState.RUNNING:
        return job
    attempt = attempts[-1]
    pid_file = plane.paths(job.id).attempt(attempt.number) / "node.pid"
    if node_alive(pid_file) is not False:
        return job
    job = _replay_backlog(plane, job, attempt.number)
    if plane.store.attempts(job.id)[-1].state is not AttemptState.RUNNING:
        return job  # the backlog said how the attempt ended
    now = plane.clock.now()
    plane.store.end_attempt(job.id, attempt.number, state=AttemptState.LOST, at=now, exit_code=None)
    _withdraw_notices(plane.paths(job.id).notices)
    partial = ""
    cut_short = list(incomplete()) if incomplete is not None else []
    if cut_short:
        partial = (
            f"; checkpoint {', '.join(cut_short)} is incomplete (its upload was cut short): it "
            "is not resumable and is kept for inspection"
        )
    if latest_checkpoint is not None:
        plane.record(
            job.id,
            "node-died",
            f"the node of attempt {attempt.number} stopped without reporting (its job process "
            f"stopped with it); the job keeps its state: checkpoint "
            f"{latest_checkpoint.checkpoint_id}, the last complete one; resume with "
            f"`portal resume {job.name or job.id}`{partial}",
            checkpoint=latest_checkpoint.checkpoint_id,
            incomplete=cut_short,
        )
        return plane.set_state(job.id, JobState.SUSPENDED)
    plane.record(
        job.id,
        "node-died",
        f"the node of attempt {attempt.number} stopped without reporting before any checkpoint "
        f"was complete; run the script again with `portal run`{partial}",
        incomplete=cut_short,
    )
    return plane.set_state(job.id, JobState.FAILED)
