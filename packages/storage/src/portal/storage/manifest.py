"""The checkpoint manifest: the JSON document sealed inside each checkpoint's manifest object
(see :mod:`portal.storage.format`), naming its chunks in order.

Stored for as long as the checkpoint is kept, so it follows msgspec's schema-evolution rules: a
new field always gets a default; fields are never reordered, renamed or retyped. ``format`` says
what a reader must understand; a newer one is refused with "upgrade".
"""

from __future__ import annotations

from typing import Any

import msgspec

from portal.core.errors import PortalError
from portal.core.wire import Wire

__all__ = ["MANIFEST_FORMAT", "ChunkEntry", "Manifest", "decode_manifest"]

#: Current version of the checkpoint manifest format. Readers accept this and every older one.
#: 1: one stored object per chunk. 2: chunks may be stored packed, several to an object
#: (``ChunkEntry.offset``); a format-1 reader would misread those, so it is told to upgrade.
MANIFEST_FORMAT = 2


class ChunkEntry(Wire, frozen=True, kw_only=True):
    """One chunk of a checkpoint's byte stream."""

    index: int
    fingerprint: str  # keyed fingerprint (no plaintext hash is exposed)
    size: int  # plaintext bytes
    stored_size: int  # bytes as stored (encrypted)
    key: str  # object key of the stored chunk, relative to the job's root
    # The checkpoint and position whose associated data sealed the stored chunk. A chunk reused
    # from an earlier checkpoint (dedup) keeps the seal it was encrypted under; None means "this
    # checkpoint, this index". Added for portal-storage (manifest format 1 readers ignore it).
    sealed_in: str | None = None
    sealed_index: int | None = None
    # Where the sealed chunk starts inside the object ``key`` when several chunks are packed into
    # one object (manifest format 2); None: the object holds this chunk alone (format 1).
    offset: int | None = None


class Manifest(Wire, frozen=True, kw_only=True):
    """Written last: a checkpoint without its manifest is incomplete and never resumed."""

    # A manifest that does not say its format is format 1 (its writer left the field out at its
    # default); writers always write it (portal-storage's ``_manifest_json``).
    format: int = 1
    job_id: str
    checkpoint_id: str
    created_at: float
    chunks: list[ChunkEntry] = msgspec.field(default_factory=list)
    total_size: int = 0
    fingerprint: str = ""  # keyed fingerprint of the whole plaintext stream
    # How chunk fingerprints were computed; absent means what the first release used.
    fingerprint_algorithm: str = "hmac-sha256"
    parent: str | None = None  # the previous checkpoint (chunks shared with it are not re-sent)
    python: str = ""  # e.g. "cpython-3.11"
    #: What the state holds and how large.
    summary: dict[str, Any] = msgspec.field(default_factory=dict)


_manifest_decoder = msgspec.json.Decoder(Manifest)


def decode_manifest(data: bytes | str) -> Manifest:
    """Decode a manifest; refuses one written by a newer Portal with a clear error."""
    manifest = _manifest_decoder.decode(data)
    if manifest.format > MANIFEST_FORMAT:
        raise PortalError(
            f"checkpoint {manifest.checkpoint_id} of job {manifest.job_id} has manifest format "
            f"{manifest.format}, newer than this Portal reads ({MANIFEST_FORMAT}): upgrade Portal "
            "on this machine to resume it"
        )
    return manifest
