"""Which checkpoint ``portal resume`` continues from: the last one the control plane recorded.

The store alone cannot say which checkpoint is the job's last: a bucket writer who deletes the
newest one leaves an older one that is still complete, and resuming from it would do work again
(its side effects twice) without a word. The control plane records every checkpoint stored
(``uploaded``, ``suspended``, ``checkpoint-periodic`` events) and every one found damaged
(:mod:`portal.control.checkpoints`), so the resume takes the newest checkpoint that is complete
and not damaged only when it is the recorded last one (or newer: a record still on its way from a
node's journal). Otherwise it refuses, naming the last one, what is wrong with it and the work
an earlier one would do again; ``--use-earlier`` (or a yes at the terminal's question) takes the
newest resumable one knowingly, ``--checkpoint ID`` any resumable one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from portal.control.checkpoints import CheckpointView, job_checkpoints, recorded_checkpoints
from portal.core import units
from portal.core.domain import CheckpointRef, Event, Job
from portal.core.errors import InvalidArgumentError

if TYPE_CHECKING:  # the store's modules load only when a command needs them
    from portal.storage import CheckpointStore

__all__ = ["recorded_checkpoint", "resume_point"]


def recorded_checkpoint(events: Iterable[Event]) -> str | None:
    """The last checkpoint the control plane recorded as stored (in the job's ``events``)."""
    return next(reversed(recorded_checkpoints(events)), None)


def _listing(views: list[CheckpointView]) -> str:
    return ", ".join(v.id for v in views if v.resumable) or "none"


def resume_point(
    plane: Any,
    store: CheckpointStore,
    job: Job,
    chosen: str | None,
    ref: str,
    *,
    use_earlier: bool = False,
    confirm: Callable[[str], bool] | None = None,
) -> CheckpointRef:
    """The checkpoint to resume ``job`` from (``ref``: how the user named the job).

    ``confirm(question)``: asks the user (a terminal); None where nobody can answer."""
    refs = {r.checkpoint_id: r for r in store.list(job.id)}
    events = [e for _, e in plane.store.events(job.id)]
    # One the user names is read again: a mark of damage may be out of date (its bytes
    # restored since), and this is the user asking for that checkpoint in particular.
    views = job_checkpoints(
        plane,
        store,
        job.id,
        recheck=() if chosen is None else (chosen,),
        listed=list(refs.values()),
        events=events,
    )
    by_id = {v.id: v for v in views}
    if chosen is not None:
        view = by_id.get(chosen)
        if view is None or not view.resumable:
            what = "no checkpoint" if view is None else f"checkpoint {chosen} is {view.state}"
            why = "" if view is None else f" ({view.why})"
            raise InvalidArgumentError(
                f"job {job.id} has {what}{'' if view else ' ' + chosen}{why}; its resumable "
                f"checkpoints: {_listing(views)} (`portal checkpoints {ref}` lists them all)",
                details={"job": job.id, "checkpoint": chosen},
            )
        return refs[chosen]
    usable = [v for v in views if v.resumable]
    newest = usable[-1] if usable else None
    recorded = recorded_checkpoint(events)
    if newest is None and recorded is not None and not refs:
        raise InvalidArgumentError(
            f"the store {store.url} holds no checkpoint of job {job.id}, though its checkpoint "
            f"{recorded} was stored there: the store may have moved, or be another one than "
            "the job's. Point PORTAL_STORAGE_URL at where the job's checkpoints are now, and "
            "resume again",
            details={"job": job.id, "recorded": recorded, "store": store.url},
        )
    last = by_id.get(recorded) if recorded is not None else None
    if (
        last is None
        or last.resumable
        or (newest is not None and newest.created_at > last.created_at)
    ):
        if newest is None:
            raise InvalidArgumentError(
                f"job {job.id} has no complete checkpoint to resume from; `portal checkpoints "
                f"{ref}` lists what it has and why"
            )
        return refs[newest.id]
    if newest is None:
        raise InvalidArgumentError(
            f"job {job.id}'s last checkpoint, {last.id}, is {last.state}: {last.why}. No other "
            f"checkpoint of it can be resumed (`portal checkpoints {ref}` lists them all)",
            details={"job": job.id, "recorded": last.id, "state": last.state},
        )
    since = units.clock(newest.created_at) if newest.created_at else "its time"
    question = (
        f"job {job.id}'s last checkpoint, {last.id}, is {last.state}: {last.why}. The newest "
        f"checkpoint that can be resumed is {newest.id} (stored at {since}); resuming from it "
        f"does the work done since then again"
    )
    if use_earlier or (confirm is not None and confirm(f"{question}. Resume from {newest.id}?")):
        return refs[newest.id]
    raise InvalidArgumentError(
        f"{question}. Check the store (someone may have deleted or altered checkpoints); to "
        f"resume from the earlier one knowingly: portal resume {ref} --use-earlier (or "
        f"--checkpoint {newest.id})",
        details={"job": job.id, "recorded": last.id, "newest": newest.id, "state": last.state},
    )
