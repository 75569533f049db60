"""Where things live under a store's root, and which names are allowed there.

::

    ROOT/jobs/JOB/packs/CKPT.N                    packs of encrypted chunks (immutable once written)
    ROOT/jobs/JOB/chunks/ID                       one encrypted chunk each (manifest format 1)
    ROOT/jobs/JOB/checkpoints/CKPT/started        intent marker, written first
    ROOT/jobs/JOB/checkpoints/CKPT/manifest       sealed manifest, written last
    ROOT/volumes/NAME/volume                      a volume's marker
    ROOT/volumes/NAME/manifest                    the committed file list
    ROOT/volumes/NAME/blobs/SHA256                file contents

Ids become path segments on every backend, so they are restricted to a portable alphabet: no
``/``, no ``..``, nothing a shell or a URL would mangle.
"""

from __future__ import annotations

import re
import secrets
import time

from portal.core.clock import Clock
from portal.storage.errors import InvalidStorageUrlError

__all__ = [
    "MANIFEST_NAME",
    "STARTED_NAME",
    "check_id",
    "checkpoint_prefix",
    "checkpoints_prefix",
    "chunk_key",
    "chunks_prefix",
    "new_checkpoint_id",
    "pack_name",
    "packs_prefix",
]

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MANIFEST_NAME = "manifest"
STARTED_NAME = "started"


def check_id(value: str, what: str) -> str:
    """Refuse an id that cannot be a single path segment on every backend."""
    if not isinstance(value, str) or not _ID.fullmatch(value) or ".." in value:
        raise InvalidStorageUrlError(
            f"{what} {value!r} cannot name objects in the store: use 1-128 letters, digits, '.', "
            "'_' or '-', starting with a letter or digit, without '..'",
            details={"what": what, "value": str(value)},
        )
    return value


def new_checkpoint_id(clock: Clock) -> str:
    """A fresh checkpoint id that sorts by creation time (UTC, milliseconds) and never collides."""
    now = clock.now()
    millis = round(now * 1000)
    seconds, ms = divmod(millis, 1000)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(seconds))
    return f"{stamp}.{ms:03d}Z-{secrets.token_hex(4)}"


def job_prefix(job_id: str) -> str:
    return f"jobs/{job_id}/"


def chunks_prefix(job_id: str) -> str:
    return f"jobs/{job_id}/chunks/"


def packs_prefix(job_id: str) -> str:
    return f"jobs/{job_id}/packs/"


def checkpoints_prefix(job_id: str) -> str:
    return f"jobs/{job_id}/checkpoints/"


def checkpoint_prefix(job_id: str, checkpoint_id: str) -> str:
    return f"jobs/{job_id}/checkpoints/{checkpoint_id}/"


def chunk_name(fingerprint: str, checkpoint_id: str, index: int) -> str:
    """A chunk's object name, relative to the job: its content address plus the seal it carries.

    The fingerprint makes identical content findable; the seal (checkpoint and position it was
    encrypted under, which is also its associated data) makes every object immutable: a chunk is
    never overwritten, so no older checkpoint can lose the exact object its manifest names.
    """
    return f"chunks/{fingerprint}.{checkpoint_id}.{index}"


def pack_name(checkpoint_id: str, number: int) -> str:
    """The object name of pack ``number`` of ``checkpoint_id``, relative to the job.

    Named by the checkpoint that wrote it, so a pack is never overwritten (a later checkpoint that
    reuses some of its chunks points into it and writes its new chunks into packs of its own).
    """
    return f"packs/{checkpoint_id}.{number}"


def chunk_key(job_id: str, name: str) -> str:
    return f"jobs/{job_id}/{name}"
