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

JOB = "job-t"


@pytest.fixture
def small() -> tuple[CheckpointStore, str, bytes]:
    """A small checkpoint: three chunks (one reused from a parent) and a manifest."""
    store = CheckpointStore(
        f"memory://tamper-{random.getrandbits(48):x}", MemoryKeyStore(), chunk_size=48
    )
    store.create_job_key(JOB)
    with store.open_writer(JOB) as w:
        w.write(b"A" * 48 + b"B" * 48)
        w.commit()
    data = b"A" * 48 + b"C" * 48 + b"tail"
    with store.open_writer(JOB) as w:
        w.write(data)
        ckpt = w.commit().checkpoint_id
    return store, ckpt, data


def _objects(store: CheckpointStore, ckpt: str) -> list[str]:
    manifest = store.manifest(JOB, ckpt)
    return [f"jobs/{JOB}/{c.key}" for c in manifest.chunks] + [
        checkpoint_prefix(JOB, ckpt) + "manifest"
    ]


def _read(store: CheckpointStore, ckpt: str) -> bytes:
    return store.open_reader(JOB, ckpt).read_all()


def test_every_single_byte_flip_is_detected(small: tuple[CheckpointStore, str, bytes]) -> None:
    store, ckpt, data = small
    assert _read(store, ckpt) == data
    flips = 0
    for key in _objects(store, ckpt):
        original = store.backend.read_bytes(key)
        for position in range(len(original)):
            for mask in (0x01, 0x80, 0xFF):
                damaged = bytearray(original)
                damaged[position] ^= mask
                store.backend.write_bytes(key, bytes(damaged))
                with pytest.raises(CheckpointCorruptError) as info:
                    _read(store, ckpt)
                assert info.value.code == "CHECKPOINT_CORRUPT"
                assert ckpt in str(info.value) and JOB in str(info.value)
                flips += 1
        store.backend.write_bytes(key, original)
    assert flips > 1000
    assert _read(store, ckpt) == data


def test_every_truncation_is_detected(small: tuple[CheckpointStore, str, bytes]) -> None:
    store, ckpt, _ = small
    for key in _objects(store, ckpt):
        original = store.backend.read_bytes(key)
        for length in range(len(original)):
            store.backend.write_bytes(key, original[:length])
            with pytest.raises(CheckpointCorruptError):
                _read(store, ckpt)
        store.backend.write_bytes(key, original + b"\x00")  # and an extension
        with pytest.raises(CheckpointCorruptError):
            _read(store, ckpt)
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


def test_swapped_or_replayed_chunks_are_detected(small: tuple[CheckpointStore, str, bytes]) -> None:
    store, ckpt, _ = small
    chunks = store.manifest(JOB, ckpt).chunks
    keys = [f"jobs/{JOB}/{c.key}" for c in chunks]
    blobs = [store.backend.read_bytes(k) for k in keys]
    # swap two chunk objects
    store.backend.write_bytes(keys[1], blobs[2])
    store.backend.write_bytes(keys[2], blobs[1])
    with pytest.raises(CheckpointCorruptError, match=r"authentication|bytes as stored"):
        _read(store, ckpt)
    store.backend.write_bytes(keys[1], blobs[1])
    store.backend.write_bytes(keys[2], blobs[2])
    # replay: the same content sealed at another position (reused chunk 0 put at position 1)
    store.backend.write_bytes(keys[1], blobs[0])
    with pytest.raises(CheckpointCorruptError):
        _read(store, ckpt)
    store.backend.write_bytes(keys[1], blobs[1])
    assert len(_read(store, ckpt)) == sum(c.size for c in chunks)


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
