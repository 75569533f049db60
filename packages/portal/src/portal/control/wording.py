"""Every sentence a job's events say, in one place (the spec's wording is the model)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from portal.core.domain import Job, Notice
from portal.core.wire import ProblemRecord

__all__ = [
    "abandoned",
    "deferred",
    "done",
    "failed",
    "notice",
    "notice_withdrawn",
    "pause_failed",
    "pause_unreachable",
    "paused",
    "pausing",
    "rebalance",
    "restoring",
    "started",
    "suspended",
    "upload_failed",
    "uploaded",
    "watching",
]


def clock_time(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def size(n: float) -> str:
    """Bytes as people read them (10^3 steps, like the spec's "12.0 GB")."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def resume_hint(job: Job) -> str:
    return f"portal resume {job.name or job.id}"


def watching(names: Sequence[str]) -> str:
    return f"node watching notice sources: {', '.join(names) or 'none'}"


def started(attempt: int, pid: int) -> str:
    return f"attempt {attempt} started (process {pid})"


def notice(n: Notice, now: float) -> str:
    return (
        f"notice from {n.provider} ({n.source}, {n.kind}): the machine goes at "
        f"{clock_time(n.deadline)}, in {n.remaining_s(now):.0f} s"
    )


def notice_withdrawn(n: Notice) -> str:
    return f"notice {n.id} from {n.provider} was withdrawn: the job goes on"


def rebalance(n: Notice, now: float) -> str:
    return (
        f"rebalance recommendation from {n.provider}: the machine is at elevated risk of "
        "being taken; no pause yet"
    )


def pausing(deadline: float, machine_deadline: float) -> str:
    return (
        f"pausing at the next safe point, by {clock_time(deadline)}; the rest of the notice "
        f"(until {clock_time(machine_deadline)}) is kept for saving and uploading"
    )


def pause_unreachable() -> str:
    return (
        "the job's process does not answer pause requests (it may still be starting): its "
        "work since the last checkpoint is lost if the machine goes"
    )


def deferred(problem: ProblemRecord) -> str:
    where = problem.where or "its current pause point"
    if problem.kind == "position":
        return f"the pause waits: {problem.reason} (at {where})"
    return (
        f"the pause waits: a checkpoint cannot carry {problem.name} "
        f"({problem.type_name}: {problem.reason}) (at {where})"
    )


def abandoned(reason: str) -> str:
    if reason == "deadline":
        return (
            "no safe point was reached before the pause deadline: the job goes on, and its "
            "work since the last checkpoint is lost if the machine goes"
        )
    return "the pause was cancelled: the job goes on"


def pause_failed(error: str) -> str:
    return f"writing the checkpoint failed ({error}): the job goes on"


def paused(where: str, n: int) -> str:
    return f"paused at {where}: checkpoint of {size(n)} written"


def uploaded(n: int, seconds: float) -> str:
    return f"checkpoint uploaded: {size(n)} in {seconds:.1f} s, encrypted with the job's key"


def upload_failed(exc: BaseException, path: Path) -> str:
    return (
        f"the checkpoint could not be uploaded ({type(exc).__name__}: {exc}); it is kept at "
        f"{path} for inspection"
    )


def suspended(job: Job, checkpoint_id: str, n: int) -> str:
    return (
        f"suspended: checkpoint {checkpoint_id} ({size(n)}) is complete; resume with "
        f"`{resume_hint(job)}`"
    )


def restoring(checkpoint_id: str, n: int, seconds: float) -> str:
    return f"checkpoint {checkpoint_id} ({size(n)}) downloaded and verified in {seconds:.1f} s"


def done(job: Job) -> str:
    return "done: the script ended with exit code 0"


def failed(job: Job, code: int) -> str:
    return f"failed: the script ended with exit code {code}"
