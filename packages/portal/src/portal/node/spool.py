"""A checkpoint written whole but not stored: kept, and stored by the next resume.

A paused job's process has exited once its checkpoint file is written (exit 75), so when the
upload then fails (the store's disk full, the bucket unreachable) that file is the job's only
copy of its state. Dropping it would lose the job's work; calling the job ``failed`` would make
the work unreachable. So the node keeps the file in its attempt folder, says where in the
``upload-failed`` event (``kept``), and leaves the job ``suspended``; ``portal resume`` stores
the kept file first (once the user has made room or fixed the store) and continues from it.

The file is whole: the runtime writes it under a temporary name and renames it only after its
last byte and fsync (``portal.capture.image.write_image``), and the runtime checks its CRC again
when it loads it from the store.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from portal.control.checkpoints import kept_checkpoint
from portal.core.domain import CheckpointRef, Job
from portal.core.errors import PortalError

__all__ = ["KeptCheckpointError", "store_file", "store_kept"]

_PIECE = 4 * 1024 * 1024


class KeptCheckpointError(PortalError):
    """The checkpoint a paused attempt kept locally could still not be stored."""

    code = "KEPT_CHECKPOINT_NOT_STORED"


def store_file(
    store: Any, job_id: str, path: Path, *, attempt: int, deadline: float | None = None
) -> CheckpointRef:
    """Upload the checkpoint file at ``path`` as a new checkpoint of ``job_id``. A failed
    upload leaves nothing behind in the store (its parts would only take room: on a full disk,
    the room the next try needs)."""
    size = path.stat().st_size
    writer = store.open_writer(job_id, expected_bytes=size, deadline=deadline)
    try:
        with path.open("rb") as src:
            while piece := src.read(_PIECE):
                writer.write(piece)
        ref: CheckpointRef = writer.commit({"bytes": size, "attempt": attempt})
    except BaseException:
        with contextlib.suppress(Exception):
            writer.discard()
        raise
    return ref


def store_kept(plane: Any, store: Any, job: Job) -> CheckpointRef | None:
    """Store the checkpoint the job's last attempt kept locally, if any (see module doc); the
    control plane records it as uploaded, so the resume continues from it."""
    found = kept_checkpoint(e for _, e in plane.store.events(job.id))
    if found is None:
        return None
    path, attempt = found
    try:
        ref = store_file(store, job.id, path, attempt=attempt)
    except Exception as exc:
        raise KeptCheckpointError(
            f"job {job.id}'s last checkpoint, kept at {path} when its upload failed, could "
            f"still not be stored in {store.url} ({type(exc).__name__}: {exc}). Make room there "
            "(or fix the store), then resume again: the job stays suspended and the file stays",
            details={"job": job.id, "kept": str(path), "store": store.url},
        ) from exc
    plane.record(
        job.id,
        "uploaded",
        f"the checkpoint kept at {path} is stored now, as {ref.checkpoint_id}",
        checkpoint=ref.checkpoint_id,
        attempt=attempt,
        kept_until=str(path),
    )
    path.unlink(missing_ok=True)
    return ref
