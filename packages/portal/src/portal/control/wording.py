"""Every sentence a job's events say, in one place (the spec's wording is the model)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from portal.core.domain import Job, Notice
from portal.core.units import clock, size
from portal.runtime.protocol import ProblemRecord

__all__ = [
    "abandoned",
    "acknowledge_failed",
    "acknowledged",
    "carry_blocked",
    "carry_ok",
    "carry_partial",
    "carry_unblocked",
    "carry_warning",
    "deferred",
    "done",
    "every",
    "failed",
    "lost_way_out",
    "notice",
    "notice_withdrawn",
    "pause_failed",
    "pause_unreachable",
    "paused",
    "pausing",
    "periodic_every",
    "periodic_failed",
    "periodic_saved",
    "portal_error",
    "rebalance",
    "reported_late",
    "restoring",
    "resumes_from_periodic",
    "settings_refused",
    "started",
    "suspended",
    "upload_failed",
    "upload_progress",
    "uploaded",
    "watching",
]


def resume_hint(job: Job) -> str:
    return f"portal resume {job.name or job.id}"


def watching(names: Sequence[str]) -> str:
    return f"node watching notice sources: {', '.join(names) or 'none'}"


def acknowledged(provider: str, checkpoint_id: str) -> str:
    return (
        f"told {provider} the job is saved (checkpoint {checkpoint_id}): the event it announced "
        "may start now"
    )


def acknowledge_failed(provider: str, exc: BaseException) -> str:
    return (
        f"could not tell {provider} the job is saved ({type(exc).__name__}: {exc}); the event "
        "starts at its announced time instead, and the checkpoint is stored either way"
    )


def settings_refused(why: str) -> str:
    return f"a plugin's setting was refused ({why}); the notice sources use their own defaults"


def machine(facts: dict[str, Any]) -> str:
    """What the notice sources say this machine is: ``aws c7i.large, spot, us-east-1a``."""
    what = " ".join(str(facts[k]) for k in ("provider", "instance_type") if facts.get(k))
    bought = {"spot": "spot", "on_demand": "on-demand", "reserved": "reserved"}.get(
        str(facts.get("capacity")), "bought how, it does not say"
    )
    where = facts.get("zone") or facts.get("region")
    return f"this machine is {what or 'of an unknown kind'}, {bought}" + (
        f", in {where}" if where else ""
    )


def started(attempt: int, pid: int) -> str:
    return f"attempt {attempt} started (process {pid})"


def notice(n: Notice, now: float) -> str:
    return (
        f"notice from {n.provider} ({n.source}, {n.kind}): the machine goes at "
        f"{clock(n.deadline)}, in {n.remaining_s(now):.0f} s"
    )


def notice_unusable(notice_id: str, provider: str, exc: BaseException) -> str:
    return (
        f"notice {notice_id} from {provider} was ignored: the node could not act on it "
        f"({type(exc).__name__}: {exc}). The job goes on; this is a bug in Portal or in the "
        "notice's source: report it with the node's log (node.log)"
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
        f"pausing at the next safe point, by {clock(deadline)}; the rest of the notice "
        f"(until {clock(machine_deadline)}) is kept for saving and uploading"
    )


def pause_waiting(deadline: float) -> str:
    return (
        "the job's process is still starting (restoring its state): the pause is asked the "
        f"moment it listens, by {clock(deadline)}"
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


def pause_failed(error: str, previous: str | None = None) -> str:
    kept = (
        f"; its last complete checkpoint, {previous}, is kept"
        if previous
        else "; it has no complete checkpoint yet"
    )
    return f"writing the checkpoint failed ({error}): the job goes on{kept}"


def paused(where: str, n: int) -> str:
    return f"paused at {where}: checkpoint of {size(n)} written"


def uploaded(n: int, seconds: float, *, streamed: bool = False) -> str:
    how = ", streamed while it was written" if streamed else ""
    return f"checkpoint uploaded: {size(n)} in {seconds:.1f} s{how}, encrypted with the job's key"


def upload_progress(progress: Any) -> str:
    """One line of a :class:`portal.storage.Progress`: done, total, rate, time left."""
    total = f" of {size(progress.expected_bytes)}" if progress.expected_bytes else ""
    rate = f", {size(progress.rate_bps)}/s" if progress.rate_bps else ""
    eta = f", {progress.eta_s:.0f} s left" if progress.eta_s is not None else ""
    late = " (the projection says it will miss the deadline)" if progress.will_miss_deadline else ""
    return f"uploading the checkpoint: {size(progress.bytes_done)}{total}{rate}{eta}{late}"


def reported_late(since: float, now: float, kept: int) -> str:
    return (
        f"the control plane could not be reached from {clock(since)} to {clock(now)}: "
        f"the node carried on alone and kept {kept} report(s), recorded now with their own "
        "times"
    )


def upload_failed(
    exc: BaseException, path: Path, job: Job, previous: str | None, *, kept: bool
) -> str:
    why = f"the checkpoint could not be uploaded ({type(exc).__name__}: {exc})"
    if kept:
        return (
            f"{why}; it is kept whole at {path}, and `{resume_hint(job)}` stores it first and "
            "continues from it: make room in the store (or fix it), then resume"
        )
    earlier = (
        f"the job keeps checkpoint {previous}, its last complete one: resume with "
        f"`{resume_hint(job)}` (the work since that one is done again)"
        if previous
        else "the job has no earlier complete checkpoint"
    )
    return f"{why}; {earlier}"


def overrun(checkpoint_id: str, late_s: float, deadline: float, n: int) -> str:
    return (
        f"checkpoint {checkpoint_id} ({size(n)}) was stored {late_s:.1f} s after the machine's "
        f"deadline ({clock(deadline)}): a real reclaim would have cut it off, and the job would "
        "have lost the work since its previous checkpoint. Its state takes longer to save than "
        "this notice gives: make it smaller, or keep it off machines with a notice this short"
    )


def suspended(job: Job, checkpoint_id: str, n: int) -> str:
    return (
        f"suspended: checkpoint {checkpoint_id} ({size(n)}) is complete; resume with "
        f"`{resume_hint(job)}`"
    )


def restoring(checkpoint_id: str, n: int, seconds: float) -> str:
    return f"checkpoint {checkpoint_id} ({size(n)}) downloaded and verified in {seconds:.1f} s"


def portal_error(code: str, message: str) -> str:
    return f"Portal could not run the script (Portal's error, not the script's): {message} [{code}]"


def done(job: Job) -> str:
    return "done: the script ended with exit code 0"


def failed(job: Job, code: int) -> str:
    return f"failed: the script ended with exit code {code}"


def _ended(code: int) -> str:
    if code < 0:
        try:
            import signal

            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"ended with exit code {code}"


def died_while_writing(job: Job, code: int, during: str, checkpoint_id: str) -> str:
    """The job's process died while Portal was writing or loading its state (an OOM kill, say):
    the job is not the script's failure, and its last complete checkpoint still stands."""
    return (
        f"suspended: the job's process {_ended(code)} during {during}; that checkpoint is not "
        f"kept, the last complete one ({checkpoint_id}) is; resume with `{resume_hint(job)}`"
    )


# --- the checkpoint check -------------------------------------------------------------------------


def carry_warning(problem: ProblemRecord, notice_s: float | None) -> str:
    """The spec's warning for one value a checkpoint cannot carry.

    ``notice_s``: the machine's notice when it is a spot machine (None: it has none).
    """
    if notice_s is not None:
        risk = (
            f"If this spot machine is reclaimed (its notice is {notice_s:.0f} s), its work "
            "since the last checkpoint would be lost."
        )
    else:
        risk = "If this machine goes, its work since the last checkpoint would be lost."
    return (
        f"A checkpoint of this job cannot carry {problem.name} ({problem.type_name}: "
        f"{problem.reason}). Portal cannot move or suspend it while it holds them, and it "
        f"cannot be saved on a notice. {risk} Create them again after a pause point instead "
        f"of keeping them across one (checked at {problem.where or 'its pause point'})."
    )


def carry_ok(where: str, checked_bytes: int, seconds: float, *, cleared: bool) -> str:
    head = (
        "The checkpoint check passed again: a checkpoint of this job can now carry its whole state"
        if cleared
        else "The checkpoint check passed: a checkpoint of this job can carry its whole state"
    )
    return f"{head} ({size(checked_bytes)} checked in {seconds:.1f} s at {where})."


def carry_partial(where: str, checked_bytes: int, seconds: float) -> str:
    return (
        f"The checkpoint check walked this job's state for {seconds:.1f} s (its limit) and "
        f"did not finish: the state is larger than it can check; nothing it could not carry "
        f"was found in the part it checked (at {where})."
    )


def carry_blocked(after_s: float, reasons: Sequence[ProblemRecord]) -> str:
    if reasons:
        why = "; ".join(_reason(r) for r in reasons)
    else:
        why = (
            "no line of the script ran: it is in one long call outside its own code (a native "
            "call, or a library's own loop)"
        )
    return (
        f"This job passed no pause point for {after_s:.0f} s, so it is blocked: Portal cannot "
        f"move or suspend it now, and it cannot be saved on a notice. The pause points gave: "
        f"{why}. Close files and threads it holds when not in use, or hold them inside a with "
        "block that ends before the next loop iteration."
    )


def carry_unblocked(where: str) -> str:
    return (
        f"The checkpoint check reached a pause point again (at {where}): the job is no longer "
        "blocked."
    )


def _reason(r: ProblemRecord) -> str:
    at = r.where or "its pause point"
    if r.kind == "position":
        return f"{r.reason} (at {at})"
    return f"it holds {r.name} ({r.type_name}: {r.reason}) (at {at})"


def no_rehearsal(purchase: str) -> str:
    """The job's event when ``capture_probe = full`` cannot rehearse here (the spec's words)."""
    why = (
        "this is a spot machine"
        if purchase == "spot"
        else "the node was not told this machine's purchase model"
    )
    return (
        "capture_probe is full, but the checkpoint check runs without its rehearsal here: the "
        "rehearsal runs on on-demand machines only, as a real checkpoint cannot be cut short, "
        f"and {why}. The check itself still runs."
    )


def plan_no_rehearsal(offer: str) -> str:
    """The plan's line when ``capture_probe = full`` and the plan picks a spot offer."""
    return (
        f"capture_probe is full, but on {offer} the checkpoint check would run without its "
        "rehearsal: the rehearsal runs on on-demand machines only, as a real checkpoint cannot "
        "be cut short"
    )


def rehearsed(where: str, size_bytes: int, seconds: float) -> str:
    return (
        f"The checkpoint check rehearsed a real checkpoint on this machine's disk: "
        f"{size(size_bytes)} written in {seconds:.1f} s, then deleted (at {where})."
    )


# --- periodic checkpoints ---------------------------------------------------------------------


def every(seconds: float) -> str:
    """An interval as people say it: 30 s, 10 min, 1 h."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def periodic_every(seconds: float, origin: str) -> str:
    return (
        f"periodic checkpoints every {every(seconds)} ({origin}): if the machine is lost without "
        "notice, the job resumes from the last one"
    )


def periodic_saved(checkpoint_id: str, n: int, stall_s: float, where: str) -> str:
    at = f" at {where}" if where else ""
    return (
        f"periodic checkpoint {checkpoint_id} saved ({size(n)}, script paused "
        f"{stall_s * 1000:.0f} ms{at})"
    )


def periodic_failed(why: str, every_s: float) -> str:
    return (
        f"periodic checkpoint not saved ({why}); the job goes on and the next one is tried in "
        f"{every(every_s)}"
    )


def resumes_from_periodic(checkpoint_id: str, taken_at: float, attempt: int) -> str:
    return (
        f"attempt {attempt} was lost without notice: resuming from the periodic checkpoint "
        f"{checkpoint_id} taken at {clock(taken_at)}; the work done since then is done again"
    )


def lost_way_out(job: Job) -> str:
    return f"resume it from its last checkpoint with `{resume_hint(job)}`"


def restore_note(text: str) -> str:
    """What the restore of this attempt did otherwise than the checkpoint left it."""
    return f"on resume: {text}"
