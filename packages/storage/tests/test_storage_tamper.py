"""Every kind of damage is detected, with a clear error, before any byte is handed on."""

from __future__ import annotations

import random

import pytest

from portal.core.domain import CheckpointState
from portal.storage import (
    CheckpointCorruptError,
    CheckpointStore,
    MemoryKeyStore,
    WrongKeyError,
)
from portal.storage.layout import checkpoint_prefix
from portal.storage.manifest import ChunkEntry

JOB = "job-t"


@pytest.fixture
def small() -> tuple[CheckpointStore, str, bytes]:
    """A small checkpoint: four chunks (one reused from the parent's pack, three in a pack of its
    own) and a manifest."""
    store = CheckpointStore(
        f"memory://tamper-{random.getrandbits(48):x}", MemoryKeyStore(), chunk_size=48
    )
    store.create_job_key(JOB)
    with store.open_writer(JOB) as w:
        w.write(b"A" * 48 + b"B" * 48)
        w.commit()
    data = b"A" * 48 + b"C" * 48 + b"D" * 48 + b"tail"
    with store.open_writer(JOB) as w:
        w.write(data)
        ckpt = w.commit().checkpoint_id
    return store, ckpt, data


def _objects(store: CheckpointStore, ckpt: str) -> dict[str, list[tuple[int, int]]]:
    """Every object the checkpoint reads, with the byte ranges of it that the checkpoint uses."""
    manifest = store.manifest(JOB, ckpt)
    used: dict[str, list[tuple[int, int]]] = {}
    for c in manifest.chunks:
        start = c.offset or 0
        used.setdefault(f"jobs/{JOB}/{c.key}", []).append((start, start + c.stored_size))
    body = checkpoint_prefix(JOB, ckpt) + "manifest"
    used[body] = [(0, len(store.backend.read_bytes(body)))]
    return used


def _read(store: CheckpointStore, ckpt: str) -> bytes:
    return store.open_reader(JOB, ckpt).read_all()


def test_every_single_byte_flip_is_detected(small: tuple[CheckpointStore, str, bytes]) -> None:
    """A flip in any byte the checkpoint uses is detected; bytes of a pack that it does not use
    (the parent's chunk B) change nothing it reads."""
    store, ckpt, data = small
    assert _read(store, ckpt) == data
    flips = unused = 0
    for key, ranges in _objects(store, ckpt).items():
        original = store.backend.read_bytes(key)
        for position in range(len(original)):
            in_use = any(start <= position < end for start, end in ranges)
            for mask in (0x01, 0x80, 0xFF):
                damaged = bytearray(original)
                damaged[position] ^= mask
                store.backend.write_bytes(key, bytes(damaged))
                if not in_use:
                    assert _read(store, ckpt) == data
                    unused += 1
                    continue
                with pytest.raises(CheckpointCorruptError) as info:
                    _read(store, ckpt)
                assert info.value.code == "CHECKPOINT_CORRUPT"
                assert ckpt in str(info.value) and JOB in str(info.value)
                flips += 1
        store.backend.write_bytes(key, original)
    assert flips > 1000 and unused > 0
    assert _read(store, ckpt) == data


def test_every_truncation_is_detected(small: tuple[CheckpointStore, str, bytes]) -> None:
    store, ckpt, data = small
    for key, ranges in _objects(store, ckpt).items():
        original = store.backend.read_bytes(key)
        needed = max(end for _, end in ranges)
        for length in range(len(original)):
            store.backend.write_bytes(key, original[:length])
            if length >= needed:  # only bytes the checkpoint does not use were cut
                assert _read(store, ckpt) == data
                continue
            with pytest.raises(CheckpointCorruptError):
                _read(store, ckpt)
        store.backend.write_bytes(key, original + b"\x00")  # and an extension
        if key.endswith("/manifest"):
            with pytest.raises(CheckpointCorruptError):
                _read(store, ckpt)
        else:  # a pack read by ranges: what follows the used bytes is never read
            assert _read(store, ckpt) == data
        store.backend.write_bytes(key, original)


def test_missing_chunk_names_index_and_object(small: tuple[CheckpointStore, str, bytes]) -> None:
    store, ckpt, _ = small
    manifest = store.manifest(JOB, ckpt)
    victim = manifest.chunks[1]
    store.backend.delete(f"jobs/{JOB}/{victim.key}")
    with pytest.raises(CheckpointCorruptError) as info:
        _read(store, ckpt)
    assert "chunk 1" in str(info.value) and "missing" in str(info.value)
    assert info.value.details["chunk"] == 1
    states = {r.checkpoint_id: r.state for r in store.list(JOB, verify=True)}
    assert states[ckpt] is CheckpointState.CORRUPT
    latest = store.latest_complete(JOB, verify=True)
    assert latest is not None and latest.checkpoint_id != ckpt


def _sealed(store: CheckpointStore, entry: ChunkEntry) -> bytes:
    start = entry.offset or 0
    return store.backend.read_bytes(f"jobs/{JOB}/{entry.key}")[start : start + entry.stored_size]


def _put_sealed(store: CheckpointStore, entry: ChunkEntry, sealed: bytes) -> None:
    """Replace the bytes ``entry`` names with ``sealed`` (same length), in place in its pack."""
    key = f"jobs/{JOB}/{entry.key}"
    start = entry.offset or 0
    blob = bytearray(store.backend.read_bytes(key))
    assert len(sealed) == entry.stored_size
    blob[start : start + entry.stored_size] = sealed
    store.backend.write_bytes(key, bytes(blob))


def test_swapped_or_replayed_chunks_are_detected(small: tuple[CheckpointStore, str, bytes]) -> None:
    store, ckpt, data = small
    chunks = store.manifest(JOB, ckpt).chunks
    assert chunks[0].sealed_in is not None and chunks[0].key != chunks[1].key  # from the parent
    assert chunks[1].key == chunks[2].key and chunks[1].offset != chunks[2].offset  # one pack
    blobs = [_sealed(store, c) for c in chunks]
    # swap two chunks inside their pack
    _put_sealed(store, chunks[1], blobs[2])
    _put_sealed(store, chunks[2], blobs[1])
    with pytest.raises(CheckpointCorruptError, match=r"authentication|bytes as stored"):
        _read(store, ckpt)
    _put_sealed(store, chunks[1], blobs[1])
    _put_sealed(store, chunks[2], blobs[2])
    # replay: the same content sealed at another position (reused chunk 0 put at position 1)
    _put_sealed(store, chunks[1], blobs[0])
    with pytest.raises(CheckpointCorruptError, match="authentication"):
        _read(store, ckpt)
    _put_sealed(store, chunks[1], blobs[1])
    assert _read(store, ckpt) == data


def test_manifest_moved_to_another_checkpoint_is_refused(
    small: tuple[CheckpointStore, str, bytes],
) -> None:
    store, ckpt, _ = small
    first = store.list(JOB)[0].checkpoint_id
    body = store.backend.read_bytes(checkpoint_prefix(JOB, ckpt) + "manifest")
    store.backend.write_bytes(checkpoint_prefix(JOB, first) + "manifest", body)
    with pytest.raises(CheckpointCorruptError, match="authentication"):
        store.open_reader(JOB, first)


def test_a_chunk_of_another_job_is_refused() -> None:
    keys = MemoryKeyStore()
    store = CheckpointStore("memory://tamper-jobs", keys, chunk_size=32)
    for job in ("ja", "jb"):
        store.create_job_key(job)
        with store.open_writer(job, checkpoint_id="c1") as w:
            w.write(b"same bytes in both jobs, 32 long")
            w.commit()
    a, b = (store.manifest(j, "c1").chunks[0] for j in ("ja", "jb"))
    store.backend.write_bytes(f"jobs/jb/{b.key}", store.backend.read_bytes(f"jobs/ja/{a.key}"))
    with pytest.raises(CheckpointCorruptError):
        store.open_reader("jb", "c1").read_all()


def test_wrong_key_is_refused_before_decryption(
    small: tuple[CheckpointStore, str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, ckpt, _ = small
    other = CheckpointStore(store.backend, MemoryKeyStore())
    other.create_job_key(JOB)
    import portal.storage.format as fmt

    def no_decrypt(*args: object, **kwargs: object) -> bytes:
        raise AssertionError("decryption attempted with the wrong key")

    monkeypatch.setattr(fmt, "aead_decrypt", no_decrypt)
    with pytest.raises(WrongKeyError) as info:
        other.open_reader(JOB, ckpt)
    assert info.value.code == "WRONG_KEY"
    assert "another key" in str(info.value) and "Nothing was decrypted" in str(info.value)
    with pytest.raises(WrongKeyError):
        other.list(JOB)
