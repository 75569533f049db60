"""Property-based tests of the chunk and manifest formats and the chunker."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from portal.storage import CheckpointCorruptError, CheckpointStore, MemoryKeyStore
from portal.storage.chunking import FixedChunker
from portal.storage.crypto import JobKeys
from portal.storage.format import (
    CHUNK_OVERHEAD,
    open_chunk,
    open_manifest,
    seal_chunk,
    seal_manifest,
)
from portal.storage.manifest import ChunkEntry, Manifest

KEYS = JobKeys("prop-job", bytes(range(32)))
_jobs = itertools.count()
STORE = CheckpointStore("memory://portal-properties", MemoryKeyStore(), parallelism=3)
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _splits(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@FAST
@given(
    data=st.binary(max_size=3000),
    cuts=st.lists(st.integers(0, 3000), max_size=8),
    chunk_size=st.integers(1, 700),
    mutable=st.booleans(),
)
def test_chunker_preserves_bytes_and_sizes(
    data: bytes, cuts: list[int], chunk_size: int, mutable: bool
) -> None:
    chunker = FixedChunker(chunk_size)
    out: list[bytes] = []
    for piece in _splits(data, cuts):
        out.extend(bytes(p) for p in chunker.feed(bytearray(piece) if mutable else piece))
    tail = chunker.cut()
    if tail is not None:
        out.append(bytes(tail))
    assert b"".join(out) == data
    assert all(len(p) == chunk_size for p in out[:-1])
    assert all(0 < len(p) <= chunk_size for p in out)


@settings(max_examples=25, deadline=None)
@given(
    data=st.binary(max_size=4000),
    cuts=st.lists(st.integers(0, 4000), max_size=6),
    chunk_size=st.integers(1, 900),
)
def test_store_round_trips_any_stream(data: bytes, cuts: list[int], chunk_size: int) -> None:
    job = f"p{next(_jobs)}"
    STORE.chunk_size = chunk_size
    STORE.create_job_key(job)
    with STORE.open_writer(job) as writer:
        for piece in _splits(data, cuts):
            writer.write(piece)
        ref = writer.commit()
    reader = STORE.open_reader(job)
    assert reader.read_all() == data
    assert reader.manifest.total_size == len(data)
    assert ref.size_bytes == len(data) + CHUNK_OVERHEAD * len(reader.manifest.chunks)


_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
_entries = st.lists(
    st.builds(
        ChunkEntry,
        index=st.integers(0, 10**6),
        fingerprint=st.text("0123456789abcdef", max_size=64),
        size=st.integers(0, 2**40),
        stored_size=st.integers(0, 2**40),
        key=_text,
        sealed_in=st.none() | _text,
        sealed_index=st.none() | st.integers(0, 10**6),
    ),
    max_size=5,
)
_manifests = st.builds(
    Manifest,
    job_id=st.just("prop-job"),
    checkpoint_id=st.from_regex(r"[a-z0-9]{1,20}", fullmatch=True),
    created_at=st.floats(0, 4e9),
    chunks=_entries,
    total_size=st.integers(0, 2**50),
    fingerprint=st.text("0123456789abcdef", max_size=64),
    parent=st.none() | _text,
    python=_text,
    summary=st.dictionaries(_text, st.integers() | _text, max_size=4),
)


@FAST
@given(manifest=_manifests, position=st.integers(0), mask=st.integers(1, 255))
def test_manifest_envelope_round_trips_and_detects_any_damage(
    manifest: Manifest, position: int, mask: int
) -> None:
    sealed = seal_manifest(KEYS, manifest)
    assert open_manifest(KEYS, sealed, checkpoint_id=manifest.checkpoint_id) == manifest
    damaged = bytearray(sealed)
    damaged[position % len(damaged)] ^= mask
    with pytest.raises(CheckpointCorruptError):
        open_manifest(KEYS, bytes(damaged), checkpoint_id=manifest.checkpoint_id)
    with pytest.raises(CheckpointCorruptError):
        open_manifest(KEYS, sealed, checkpoint_id=manifest.checkpoint_id + "x")


@FAST
@given(
    plaintext=st.binary(max_size=500),
    index=st.integers(0, 2**32),
    other=st.integers(0, 2**32),
    ckpt=st.from_regex(r"[a-z0-9]{1,12}", fullmatch=True),
)
def test_chunk_seal_binds_position_and_checkpoint(
    plaintext: bytes, index: int, other: int, ckpt: str
) -> None:
    fingerprint = KEYS.fingerprint(plaintext)
    sealed = seal_chunk(
        KEYS, checkpoint_id=ckpt, index=index, plaintext=plaintext, fingerprint=fingerprint
    )
    entry = ChunkEntry(
        index=index,
        fingerprint=fingerprint.hex(),
        size=len(plaintext),
        stored_size=len(sealed),
        key="k",
    )
    assert open_chunk(KEYS, sealed, entry=entry, checkpoint_id=ckpt) == plaintext
    # the same object claimed by another checkpoint, or another position, fails
    with pytest.raises(CheckpointCorruptError):
        open_chunk(KEYS, sealed, entry=entry, checkpoint_id=ckpt + "x")
    if other != index:
        moved = ChunkEntry(
            index=other,
            fingerprint=entry.fingerprint,
            size=entry.size,
            stored_size=entry.stored_size,
            key="k",
        )
        with pytest.raises(CheckpointCorruptError):
            open_chunk(KEYS, sealed, entry=moved, checkpoint_id=ckpt)
    # reused later: the later checkpoint names the seal, and it opens
    reused = ChunkEntry(
        index=other,
        fingerprint=entry.fingerprint,
        size=entry.size,
        stored_size=entry.stored_size,
        key="k",
        sealed_in=ckpt,
        sealed_index=index,
    )
    assert open_chunk(KEYS, sealed, entry=reused, checkpoint_id="later") == plaintext
