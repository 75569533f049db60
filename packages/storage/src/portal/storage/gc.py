"""Garbage collection of a job's stored chunks and packs.

An object is kept while any kept checkpoint's manifest names it: a chunk object (format 1) when a
manifest lists it, a **pack** while any kept manifest references any chunk in it (packs are
immutable and never rewritten, so a pack with one live chunk is kept whole; its dead bytes go
when the last checkpoint pointing into it goes). The rules, in the order they protect the job:

1. The newest complete checkpoint is never deleted, nor any chunk it names (``keep`` is at least 1).
2. While a checkpoint may be in flight (an intent marker without a manifest, younger than
   ``in_flight_grace_s``) no chunk is deleted at all: its chunks are named by no manifest yet.
   An intent marker is checked again just before deleting, to narrow the race with a writer that
   starts meanwhile. Run gc when the job is not checkpointing (after a suspend) to avoid it.
3. If any manifest cannot be authenticated, its chunks cannot be known, so no chunk is deleted and
   the report says which checkpoint stopped it (it is kept for diagnosis).
4. Incomplete checkpoints older than the grace keep their marker for inspection unless
   ``drop_incomplete``; their chunks, named by no manifest, are collected.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from portal.core.clock import Clock
from portal.core.domain import CheckpointRef, CheckpointState
from portal.core.errors import InvalidArgumentError
from portal.storage.layout import (
    MANIFEST_NAME,
    STARTED_NAME,
    checkpoint_prefix,
    chunk_key,
    chunks_prefix,
    packs_prefix,
)
from portal.storage.manifest import Manifest
from portal.storage.objects import StoredObjects

__all__ = ["GcReport", "collect"]


@attrs.frozen(kw_only=True)
class GcReport:
    """What a collection did (or, with ``dry_run``, would do)."""

    job_id: str
    deleted_chunks: tuple[str, ...] = ()
    deleted_checkpoints: tuple[str, ...] = ()
    kept_checkpoints: tuple[str, ...] = ()
    deferred: str | None = None  # why chunks were not collected, if they were not
    dry_run: bool = False


def collect(
    objects: StoredObjects,
    job_id: str,
    *,
    checkpoints: Callable[[], list[CheckpointRef]],
    manifest: Callable[[str], Manifest],
    clock: Clock,
    keep: int | None,
    in_flight_grace_s: float,
    drop_incomplete: bool,
    dry_run: bool,
) -> GcReport:
    if keep is not None and keep < 1:
        raise InvalidArgumentError(
            f"gc of job {job_id} was asked to keep {keep} checkpoints; the newest complete "
            "checkpoint is always kept, so keep must be at least 1 (or unset to keep all)",
            details={"job_id": job_id, "keep": keep},
        )
    refs = checkpoints()
    complete = [r for r in refs if r.state is CheckpointState.COMPLETE]
    corrupt = [r for r in refs if r.state is CheckpointState.CORRUPT]
    now = clock.now()
    in_flight = [
        r
        for r in refs
        if r.state is CheckpointState.INCOMPLETE
        and r.created_at > 0.0
        and now - r.created_at < in_flight_grace_s
    ]
    kept = complete if keep is None else complete[-keep:]
    dropped = [r for r in complete if r not in kept]
    stale_incomplete = [
        r for r in refs if r.state is CheckpointState.INCOMPLETE and r not in in_flight
    ]
    deferred: str | None = None
    if in_flight:
        deferred = (
            f"checkpoint {in_flight[0].checkpoint_id} may still be in flight (started "
            f"{now - in_flight[0].created_at:.0f} s ago, grace {in_flight_grace_s:.0f} s); "
            "no chunk was deleted. Run gc again once it has finished"
        )
    elif corrupt:
        deferred = (
            f"checkpoint {corrupt[0].checkpoint_id} is corrupt, so the chunks it names "
            "cannot be known; no chunk was deleted (it is kept for diagnosis). Delete "
            "that checkpoint's folder once it has been examined, then run gc again"
        )
    if deferred is not None:
        return GcReport(
            job_id=job_id,
            kept_checkpoints=tuple(r.checkpoint_id for r in kept),
            deferred=deferred,
            dry_run=dry_run,
        )

    referenced: set[str] = set()
    for ref in kept:
        for entry in manifest(ref.checkpoint_id).chunks:
            referenced.add(chunk_key(job_id, entry.key))
    stored = objects.list(chunks_prefix(job_id)) + objects.list(packs_prefix(job_id))
    orphans = [k for k in stored if k not in referenced]

    deleted_checkpoints = [r.checkpoint_id for r in dropped]
    if drop_incomplete:
        deleted_checkpoints += [r.checkpoint_id for r in stale_incomplete]
    if not dry_run:
        # A writer may have started since the listing: look again right before deleting.
        for ref in checkpoints():
            if ref.state is CheckpointState.INCOMPLETE and ref.checkpoint_id not in {
                r.checkpoint_id for r in stale_incomplete
            }:
                return GcReport(
                    job_id=job_id,
                    kept_checkpoints=tuple(r.checkpoint_id for r in kept),
                    deferred=f"checkpoint {ref.checkpoint_id} started during gc; no chunk was "
                    "deleted. Run gc again once it has finished",
                )
        # Manifests first: a checkpoint without its manifest is never resumed, so deleting its
        # chunks afterwards cannot leave a resumable checkpoint with missing chunks.
        for ckpt in deleted_checkpoints:
            prefix = checkpoint_prefix(job_id, ckpt)
            objects.delete(prefix + MANIFEST_NAME)
            objects.delete(prefix + STARTED_NAME)
            for key in objects.list(prefix):
                objects.delete(key)
        for key in orphans:
            objects.delete(key)
    return GcReport(
        job_id=job_id,
        deleted_chunks=tuple(orphans),
        deleted_checkpoints=tuple(deleted_checkpoints),
        kept_checkpoints=tuple(r.checkpoint_id for r in kept),
        dry_run=dry_run,
    )
