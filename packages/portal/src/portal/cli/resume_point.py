"""Which checkpoint ``portal resume`` continues from: the last one the control plane recorded.

The store alone cannot say which checkpoint is the job's last: a bucket writer who deletes the
newest one leaves an older one that is still complete, and resuming from it would do work again
(its side effects twice) without a word. The control plane records every checkpoint stored
(``uploaded``, ``suspended``, ``checkpoint-periodic`` events), so the store's newest complete
checkpoint must be that one, or newer (a record still on its way from a node's journal). An older
one, or a recorded one that is gone or not complete, is refused with both named; ``--checkpoint
ID`` chooses any complete checkpoint knowingly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from portal.core.domain import CheckpointRef, CheckpointState, Job
from portal.core.errors import InvalidArgumentError

if TYPE_CHECKING:  # the store's modules load only when a command needs them
    from portal.storage import CheckpointStore

__all__ = ["recorded_checkpoint", "resume_point"]

#: Events that say a checkpoint of the job was stored (their ``checkpoint`` field).
STORED_KINDS = frozenset({"uploaded", "suspended", "checkpoint-periodic"})


def recorded_checkpoint(plane: Any, job_id: str) -> str | None:
    """The last checkpoint the control plane recorded as stored for the job, if any."""
    last = None
    for _seq, event in plane.store.events(job_id):
        if event.kind in STORED_KINDS and event.data.get("checkpoint"):
            last = str(event.data["checkpoint"])
    return last


def resume_point(
    plane: Any, store: CheckpointStore, job: Job, chosen: str | None, ref: str
) -> CheckpointRef:
    """The checkpoint to resume ``job`` from (``ref``: how the user named the job)."""
    complete = {
        r.checkpoint_id: r for r in store.list(job.id) if r.state is CheckpointState.COMPLETE
    }
    listing = ", ".join(sorted(complete)) or "none"
    if chosen is not None:
        if chosen not in complete:
            raise InvalidArgumentError(
                f"job {job.id} has no complete checkpoint {chosen}; its complete checkpoints: "
                f"{listing} (`portal status {ref}` lists them all)",
                details={"job": job.id, "checkpoint": chosen},
            )
        return complete[chosen]
    latest = store.latest_complete(job.id)
    recorded = recorded_checkpoint(plane, job.id)
    if latest is None and recorded is not None and not store.list(job.id):
        raise InvalidArgumentError(
            f"the store {store.url} holds no checkpoint of job {job.id}, though its checkpoint "
            f"{recorded} was stored there: the store may have moved, or be another one than "
            "the job's. Point PORTAL_STORAGE_URL at where the job's checkpoints are now, and "
            "resume again",
            details={"job": job.id, "recorded": recorded, "store": store.url},
        )
    if latest is None:
        raise InvalidArgumentError(
            f"job {job.id} has no complete checkpoint to resume from; `portal status "
            f"{ref}` lists what it has"
        )
    if recorded is None or recorded == latest.checkpoint_id:
        return latest
    if recorded in complete:
        return latest  # the store's newest is the recorded one or newer (a record on its way)
    raise InvalidArgumentError(
        f"job {job.id}'s last checkpoint, {recorded}, is missing from the store or not "
        f"complete: resuming from {latest.checkpoint_id}, the newest complete one, "
        f"would do the work since then again. Check the store (someone "
        f"may have deleted checkpoints); to resume from an earlier one knowingly: portal resume "
        f"{ref} --checkpoint {latest.checkpoint_id}",
        details={"job": job.id, "recorded": recorded, "newest": latest.checkpoint_id},
    )
