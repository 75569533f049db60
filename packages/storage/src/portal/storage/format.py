"""The bytes of stored objects: sealed chunks, the sealed manifest, the intent marker.

A **sealed chunk** is ``b"PTLC" | version (1) | nonce (12) | AES-256-GCM(ciphertext | tag)``.
Its associated data binds the job, the checkpoint and position that sealed it, its plaintext size
and its keyed fingerprint: a chunk moved to another name, another offset, another position,
another checkpoint or another job fails authentication, and so does a replay of an old object.
Manifest format 1 stores each sealed chunk as an object of its own; format 2 stores them back to
back in **packs** (objects of several MiB), each manifest entry naming pack, offset and length, so
dedup units can be small while object stores still see few, large requests.

A **manifest object** is ``b"PTLM" | version (1) | key id (16) | nonce (12) | AEAD(JSON manifest)
| CRC-32``. The CRC (unkeyed) is checked first, so accidental damage anywhere, the key id included,
reads as *corrupt*; then a key id that is not the job key's reads as *wrong key*, before anything is
decrypted; then the AEAD (bound to the job and checkpoint ids, so a manifest copied into another
checkpoint's folder fails) says whether the manifest is exactly what the writer sealed.

The **intent marker** (``started``) is plain JSON written before the first chunk. It makes a
checkpoint cut short visible (incomplete, with its start time) and tells garbage collection a
checkpoint may be in flight. It carries nothing secret and decides nothing about trust.
"""

from __future__ import annotations

import hmac
import os
import struct
import zlib

import msgspec
from cryptography.exceptions import InvalidTag

from portal.storage.crypto import (
    FINGERPRINT_ALGORITHM,
    NONCE_SIZE,
    TAG_SIZE,
    JobKeys,
    aead_decrypt,
    aead_encrypt,
    aead_encrypt_into,
)
from portal.storage.errors import CheckpointCorruptError, StorageError, WrongKeyError
from portal.storage.manifest import MANIFEST_FORMAT, ChunkEntry, Manifest, decode_manifest

__all__ = [
    "CHUNK_OVERHEAD",
    "CheckpointIntent",
    "decode_intent",
    "encode_intent",
    "open_chunk",
    "open_manifest",
    "seal_chunk",
    "seal_chunk_into",
    "seal_manifest",
]

CHUNK_MAGIC = b"PTLC"
MANIFEST_MAGIC = b"PTLM"
ENVELOPE_VERSION = 1
_CHUNK_HEADER = len(CHUNK_MAGIC) + 1 + NONCE_SIZE
_MANIFEST_HEADER = len(MANIFEST_MAGIC) + 1 + 16 + NONCE_SIZE
_CRC = struct.Struct(">I")
#: Bytes a stored chunk adds to its plaintext.
CHUNK_OVERHEAD = _CHUNK_HEADER + TAG_SIZE


def _chunk_aad(
    header: bytes | memoryview,
    job_id: str,
    sealed_in: str,
    sealed_index: int,
    size: int,
    fingerprint: bytes,
) -> bytes:
    return b"".join(
        (
            b"portal-chunk\x00",
            bytes(header),
            job_id.encode(),
            b"\x00",
            sealed_in.encode(),
            b"\x00",
            sealed_index.to_bytes(8, "big"),
            size.to_bytes(8, "big"),
            fingerprint,
        )
    )


def seal_chunk(
    keys: JobKeys,
    *,
    checkpoint_id: str,
    index: int,
    plaintext: bytes | memoryview,
    fingerprint: bytes,
) -> bytearray:
    """Encrypt one chunk as checkpoint ``checkpoint_id`` position ``index`` seals it."""
    out = bytearray(len(plaintext) + CHUNK_OVERHEAD)
    seal_chunk_into(
        keys,
        checkpoint_id=checkpoint_id,
        index=index,
        plaintext=plaintext,
        fingerprint=fingerprint,
        out=memoryview(out),
    )
    return out


def seal_chunk_into(
    keys: JobKeys,
    *,
    checkpoint_id: str,
    index: int,
    plaintext: bytes | memoryview,
    fingerprint: bytes,
    out: memoryview,
) -> int:
    """Seal one chunk into the start of ``out`` (a pack buffer); return the bytes it takes.

    The result is byte for byte what :func:`seal_chunk` returns, so a chunk reads the same whether
    it is stored alone or packed with others.
    """
    size = len(plaintext) + CHUNK_OVERHEAD
    nonce = os.urandom(NONCE_SIZE)
    header = CHUNK_MAGIC + bytes((ENVELOPE_VERSION,)) + nonce
    aad = _chunk_aad(header, keys.job_id, checkpoint_id, index, len(plaintext), fingerprint)
    out[:_CHUNK_HEADER] = header
    aead_encrypt_into(
        keys.chunk_cipher(checkpoint_id), nonce, plaintext, aad, out[_CHUNK_HEADER:size]
    )
    return size


def sealed_by(entry: ChunkEntry, checkpoint_id: str) -> tuple[str, int]:
    """The (checkpoint, position) whose associated data sealed ``entry``'s object."""
    return (
        entry.sealed_in or checkpoint_id,
        entry.index if entry.sealed_index is None else entry.sealed_index,
    )


def open_chunk(
    keys: JobKeys,
    data: bytes | bytearray | memoryview,
    *,
    entry: ChunkEntry,
    checkpoint_id: str,
    algorithm: str = FINGERPRINT_ALGORITHM,
) -> bytes | bytearray:
    """Authenticate and decrypt one stored chunk named by a verified manifest entry.

    Raises :class:`CheckpointCorruptError` naming the chunk index and object unless the object is
    exactly the one sealed for this entry and its plaintext has the entry's fingerprint and size.
    """
    at = entry.key if entry.offset is None else f"{entry.key} at byte {entry.offset}"
    where = f"chunk {entry.index} ({at}) of checkpoint {checkpoint_id} of job {keys.job_id}"
    way_out = (
        "The checkpoint is kept for diagnosis and is not resumable; resume from an earlier "
        "checkpoint (`portal checkpoints JOB --verify` lists them; `portal resume JOB --checkpoint ID` takes one)"
    )
    view = memoryview(data)
    if len(view) != entry.stored_size or len(view) < CHUNK_OVERHEAD:
        raise CheckpointCorruptError(
            f"{where} is {len(view)} bytes as stored, the manifest says {entry.stored_size}: it "
            f"was truncated or replaced. {way_out}",
            details={
                "job_id": keys.job_id,
                "checkpoint_id": checkpoint_id,
                "chunk": entry.index,
                "key": entry.key,
                "reason": "size",
            },
        )
    header = view[:_CHUNK_HEADER]
    if bytes(header[:4]) != CHUNK_MAGIC or header[4] != ENVELOPE_VERSION:
        raise CheckpointCorruptError(
            f"{where} does not start like a Portal chunk (damaged header). {way_out}",
            details={
                "job_id": keys.job_id,
                "checkpoint_id": checkpoint_id,
                "chunk": entry.index,
                "key": entry.key,
                "reason": "header",
            },
        )
    try:
        fingerprint = bytes.fromhex(entry.fingerprint)
    except ValueError:
        fingerprint = b""
    sealed_in, sealed_index = sealed_by(entry, checkpoint_id)
    aad = _chunk_aad(header, keys.job_id, sealed_in, sealed_index, entry.size, fingerprint)
    nonce = bytes(header[5:])
    try:
        plaintext = aead_decrypt(keys.chunk_cipher(sealed_in), nonce, view[_CHUNK_HEADER:], aad)
    except InvalidTag:
        raise CheckpointCorruptError(
            f"{where} failed authentication: its bytes were altered, or it is another chunk "
            f"(another position, checkpoint or job) put in its place. {way_out}",
            details={
                "job_id": keys.job_id,
                "checkpoint_id": checkpoint_id,
                "chunk": entry.index,
                "key": entry.key,
                "reason": "authentication",
            },
        ) from None
    if len(plaintext) != entry.size or not _equal(
        keys.fingerprint(plaintext, algorithm), fingerprint
    ):
        raise CheckpointCorruptError(
            f"{where} decrypted to content whose fingerprint does not match the manifest. "
            f"{way_out}",
            details={
                "job_id": keys.job_id,
                "checkpoint_id": checkpoint_id,
                "chunk": entry.index,
                "key": entry.key,
                "reason": "fingerprint",
            },
        )
    return plaintext


def _equal(a: bytes, b: bytes) -> bool:
    return hmac.compare_digest(a, b)


def _manifest_aad(header: bytes | memoryview, job_id: str, checkpoint_id: str) -> bytes:
    return b"".join(
        (b"portal-manifest\x00", bytes(header), job_id.encode(), b"\x00", checkpoint_id.encode())
    )


def _manifest_json(manifest: Manifest) -> bytes:
    """The manifest's JSON, with ``format`` always written.

    Wire structs omit fields at their default (``Manifest.format`` defaults to 1, what a manifest
    that does not say its format is): without this, a format-1 manifest would not say its format,
    and a newer manifest must say it so that an older reader asks for an upgrade instead of
    misreading packed chunks.
    """
    fields = msgspec.to_builtins(manifest)
    fields["format"] = manifest.format
    return msgspec.json.encode(fields)


def seal_manifest(keys: JobKeys, manifest: Manifest) -> bytes:
    """The manifest as stored: encrypted, authenticated and checksummed."""
    nonce = os.urandom(NONCE_SIZE)
    header = MANIFEST_MAGIC + bytes((ENVELOPE_VERSION,)) + keys.key_id + nonce
    aad = _manifest_aad(header, manifest.job_id, manifest.checkpoint_id)
    body = aead_encrypt(keys.manifest_cipher, nonce, _manifest_json(manifest), aad, header)
    return bytes(body) + _CRC.pack(zlib.crc32(body))


def open_manifest(keys: JobKeys, data: bytes | bytearray, *, checkpoint_id: str) -> Manifest:
    """Check and decrypt a stored manifest; see the module docstring for the order of checks."""
    job_id = keys.job_id
    where = f"the manifest of checkpoint {checkpoint_id} of job {job_id}"
    details = {"job_id": job_id, "checkpoint_id": checkpoint_id}
    way_out = (
        "It is kept for diagnosis and is not resumable; resume from an earlier checkpoint "
        "(`portal checkpoints JOB --verify` lists them; `portal resume JOB --checkpoint ID` takes one)"
    )
    view = memoryview(data)
    if len(view) < _MANIFEST_HEADER + TAG_SIZE + _CRC.size:
        raise CheckpointCorruptError(
            f"{where} is {len(view)} bytes, too short to be a manifest (truncated). {way_out}",
            details={**details, "reason": "truncated"},
        )
    body, (crc,) = view[: -_CRC.size], _CRC.unpack(view[-_CRC.size :])
    if zlib.crc32(body) != crc:
        raise CheckpointCorruptError(
            f"{where} is damaged (its checksum does not match: truncated, or bytes changed). "
            f"{way_out}",
            details={**details, "reason": "checksum"},
        )
    if bytes(body[:4]) != MANIFEST_MAGIC:
        raise CheckpointCorruptError(
            f"{where} is not a Portal manifest. {way_out}", details={**details, "reason": "header"}
        )
    if body[4] > ENVELOPE_VERSION:
        raise StorageError(
            f"{where} has envelope version {body[4]}, newer than this Portal reads "
            f"({ENVELOPE_VERSION}): upgrade portal-storage on this machine to resume it",
            details={**details, "reason": "version"},
        )
    key_id = bytes(body[5:21])
    if key_id != keys.key_id:
        raise WrongKeyError(
            f"{where} was sealed with another key (key id {key_id.hex()[:12]}...) than the one "
            f"the key store holds for job {job_id} (key id {keys.key_id.hex()[:12]}...). Nothing "
            "was decrypted. Point Portal at the key store that created this job (PORTAL_HOME, or "
            "your KMS plugin's settings), or restore the job's key",
            details={**details, "found_key_id": key_id.hex(), "expected_key_id": keys.key_id.hex()},
        )
    header = body[:_MANIFEST_HEADER]
    nonce = bytes(header[21:])
    try:
        plain = aead_decrypt(
            keys.manifest_cipher,
            nonce,
            body[_MANIFEST_HEADER:],
            _manifest_aad(header, job_id, checkpoint_id),
        )
    except InvalidTag:
        raise CheckpointCorruptError(
            f"{where} failed authentication: it was altered, or it belongs to another checkpoint. "
            f"{way_out}",
            details={**details, "reason": "authentication"},
        ) from None
    try:
        manifest = decode_manifest(bytes(plain))
    except msgspec.DecodeError as exc:  # authentic but unreadable: a writer bug, not tampering
        raise CheckpointCorruptError(
            f"{where} cannot be decoded ({exc}). {way_out}", details={**details, "reason": "decode"}
        ) from None
    if manifest.job_id != job_id or manifest.checkpoint_id != checkpoint_id:
        raise CheckpointCorruptError(
            f"{where} names job {manifest.job_id} checkpoint {manifest.checkpoint_id}. {way_out}",
            details={**details, "reason": "identity"},
        )
    if manifest.format > MANIFEST_FORMAT:  # decode_manifest refuses these already; belt and braces
        raise StorageError(f"{where} has a newer manifest format; upgrade Portal")
    return manifest


class CheckpointIntent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The ``started`` marker: a checkpoint was begun at ``created_at`` (Unix seconds)."""

    format: int = 1
    job_id: str
    checkpoint_id: str
    created_at: float
    parent: str | None = None


_intent_decoder = msgspec.json.Decoder(CheckpointIntent)


def encode_intent(intent: CheckpointIntent) -> bytes:
    return msgspec.json.encode(intent)


def decode_intent(data: bytes) -> CheckpointIntent | None:
    """The marker, or ``None`` if it is unreadable (a listing then shows the time as unknown)."""
    try:
        return _intent_decoder.decode(data)
    except msgspec.DecodeError:
        return None
