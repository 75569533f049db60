"""Checkpoints through the store on every backend: round trips, dedup, listing, incomplete, gc."""

from __future__ import annotations

import os
import pickle
import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import BACKENDS

from portal.core.domain import CheckpointState
from portal.storage import (
    CheckpointIncompleteError,
    CheckpointNotFoundError,
    CheckpointStore,
    JobKeyMissingError,
    StorageError,
)
from portal.storage.format import CHUNK_OVERHEAD
from portal.storage.layout import checkpoint_prefix, packs_prefix

MakeStore = Callable[..., CheckpointStore]
CHUNK = 64 * 1024


def _state(size: int, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(size)


def _write(store: CheckpointStore, job: str, data: bytes, pieces: int = 7, **kw: object) -> str:
    with store.open_writer(job, **kw) as writer:  # type: ignore[arg-type]
        step = max(1, len(data) // pieces)
        for i in range(0, len(data), step):
            writer.write(data[i : i + step])
        return writer.commit({"bytes": len(data)}).checkpoint_id


@pytest.mark.parametrize("kind", BACKENDS)
def test_round_trip_and_incremental(kind: str, make_store: MakeStore) -> None:
    store = make_store(kind, chunk_size=CHUNK, parallelism=4)
    store.create_job_key("job-1")
    data = _state(10 * CHUNK + 1234)
    first = _write(store, "job-1", data)
    reader = store.open_reader("job-1")
    assert reader.checkpoint_id == first
    assert reader.read_all() == data
    with reader.open() as f:
        assert f.read() == data
    assert reader.manifest.summary == {"bytes": len(data)}

    changed = bytearray(data)
    changed[3 * CHUNK + 10 : 3 * CHUNK + 20] = b"x" * 10  # one chunk changes in place
    uploads: list[int] = []
    with store.open_writer("job-1", on_progress=lambda p: uploads.append(p.bytes_uploaded)) as w:
        w.write(bytes(changed))
        second = w.commit().checkpoint_id
        progress = w.progress()
    assert progress.bytes_reused == len(data) - CHUNK
    assert progress.bytes_uploaded < 2 * CHUNK + 4096  # one chunk and the manifest
    assert store.open_reader("job-1").read_all() == bytes(changed)
    assert store.open_reader("job-1", first).read_all() == data  # the parent is intact
    refs = store.list("job-1", verify=True)
    assert [r.checkpoint_id for r in refs] == [first, second]
    assert all(r.state is CheckpointState.COMPLETE for r in refs)
    latest = store.latest_complete("job-1")
    assert latest is not None and latest.checkpoint_id == second
    assert latest.url.endswith(f"/jobs/job-1/checkpoints/{second}")


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_empty_and_tiny_checkpoints(kind: str, make_store: MakeStore) -> None:
    store = make_store(kind, chunk_size=CHUNK)
    store.create_job_key("j")
    with store.open_writer("j") as w:
        ref = w.commit()
    assert ref.size_bytes == 0
    assert store.open_reader("j").read_all() == b""
    _write(store, "j", b"x", pieces=1)
    assert store.open_reader("j").read_all() == b"x"


def test_pickle_through_the_store(make_store: MakeStore) -> None:
    store = make_store("memory", chunk_size=1000)
    store.create_job_key("j")
    state = {"step": 12, "weights": list(range(5000)), "name": "resnet"}
    with store.open_writer("j") as w:
        pickle.dump(state, _Sink(w))
        w.commit()
    with store.open_reader("j").open() as f:
        assert pickle.load(f) == state
    with store.open_reader("j").stream() as f:
        assert pickle.load(f) == state


class _Sink:
    def __init__(self, writer: object) -> None:
        self.write = writer.write  # type: ignore[attr-defined]


def test_cut_keeps_later_buffers_aligned(make_store: MakeStore) -> None:
    """An insertion before a cut point costs only the chunks before it."""
    store = make_store("memory", chunk_size=CHUNK)
    store.create_job_key("j")
    big = _state(20 * CHUNK, seed=3)
    with store.open_writer("j") as w:
        w.write(b"header-v1")
        w.cut()
        w.write(big)
        w.commit()
    with store.open_writer("j") as w:
        w.write(b"header-v10 (longer)")
        w.cut()
        w.write(big)
        w.commit()
        assert w.progress().bytes_reused == len(big)


def test_dedup_within_one_checkpoint_and_seals(make_store: MakeStore) -> None:
    store = make_store("memory", chunk_size=CHUNK)
    store.create_job_key("j")
    block = _state(CHUNK, seed=9)
    with store.open_writer("j") as w:
        w.write(block * 5)
        ref = w.commit()
    manifest = store.manifest("j", ref.checkpoint_id)
    assert len({c.key for c in manifest.chunks}) == 1
    seals = [c.sealed_index for c in manifest.chunks]  # whichever transfer came first seals it
    sealer = seals.index(None)
    assert seals == [None if i == sealer else sealer for i in range(5)]
    assert store.open_reader("j").read_all() == block * 5
    (pack,) = store.objects.list(packs_prefix("j"))  # one pack, holding the block sealed once
    assert len(store.backend.read_bytes(pack)) == CHUNK + CHUNK_OVERHEAD


def test_abort_leaves_incomplete_never_resumed(make_store: MakeStore) -> None:
    store = make_store("file", chunk_size=CHUNK)
    store.create_job_key("j")
    good = _write(store, "j", _state(3 * CHUNK))
    with pytest.raises(RuntimeError), store.open_writer("j") as w:
        w.write(_state(5 * CHUNK, seed=2))
        raise RuntimeError("capture failed")
    refs = store.list("j")
    assert [r.state for r in refs] == [CheckpointState.COMPLETE, CheckpointState.INCOMPLETE]
    assert not refs[1].resumable
    latest = store.latest_complete("j")
    assert latest is not None and latest.checkpoint_id == good
    with pytest.raises(CheckpointIncompleteError) as info:
        store.open_reader("j", refs[1].checkpoint_id)
    assert info.value.code == "CHECKPOINT_INCOMPLETE"
    assert good in str(info.value)
    with pytest.raises(StorageError, match="already aborted"):
        w.write(b"more")


def test_discard_deletes_what_the_writer_stored_and_nothing_else(make_store: MakeStore) -> None:
    """A checkpoint its producer failed to write is discarded: its packs and intent go, the
    earlier checkpoint (whose chunks the discarded one shared) stays whole, and a committed
    checkpoint is refused."""
    store = make_store("file", chunk_size=CHUNK, pack_size=2 * CHUNK)
    store.create_job_key("j")
    before = _state(3 * CHUNK)
    good = _write(store, "j", before)
    root = Path(store.url.removeprefix("file://"))

    def files() -> list[Path]:
        return sorted(p for p in root.rglob("*") if p.is_file())

    files_before = files()
    w = store.open_writer("j")
    w.write(before + _state(12 * CHUNK, seed=2))  # shares its first chunks with ``good``
    deadline = time.monotonic() + 30
    while len(files()) < len(files_before) + 3 and time.monotonic() < deadline:
        time.sleep(0.01)  # its intent and packs are stored (on the writer's threads)
    assert len(files()) >= len(files_before) + 3
    w.discard()
    assert [r.checkpoint_id for r in store.list("j")] == [good]
    assert files() == files_before
    assert store.open_reader("j", good).read_all() == before
    with pytest.raises(StorageError, match="already discarded"):
        w.write(b"more")
    done = store.open_writer("j")
    done.write(b"x")
    done.commit()
    with pytest.raises(StorageError, match="is complete: it is not discarded"):
        done.discard()


def test_missing_things_have_clear_errors(make_store: MakeStore) -> None:
    store = make_store("memory")
    with pytest.raises(JobKeyMissingError) as missing_key:
        store.open_writer("nobody")
    assert missing_key.value.code == "JOB_KEY_MISSING"
    store.create_job_key("j")
    with pytest.raises(CheckpointNotFoundError, match="no complete checkpoint"):
        store.open_reader("j")
    with pytest.raises(CheckpointNotFoundError, match="no checkpoint nope"):
        store.open_reader("j", "nope")
    _write(store, "j", b"abc", checkpoint_id="fixed-id")
    with pytest.raises(StorageError, match="never overwritten"):
        store.open_writer("j", checkpoint_id="fixed-id")


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_gc_keeps_what_is_referenced(kind: str, make_store: MakeStore) -> None:
    from portal.testing import FakeClock

    clock = FakeClock()
    store = make_store(kind, chunk_size=CHUNK, pack_size=2 * CHUNK, clock=clock)
    store.create_job_key("j")
    first = _write(store, "j", _state(4 * CHUNK, seed=1))  # two packs
    clock.advance(10)
    with store.open_writer("j") as w:  # an abandoned checkpoint: two orphan packs
        w.write(_state(3 * CHUNK, seed=7))
        w.cut()
        w._submit_pack()
        for future in w._futures:
            future.result()
    clock.advance(10)
    second = _write(store, "j", _state(4 * CHUNK, seed=2))

    report = store.gc("j")  # the aborted one is younger than the grace: may be in flight
    assert report.deferred and "in flight" in report.deferred and not report.deleted_chunks

    clock.advance(7200)
    referenced = {
        f"jobs/j/{c.key}" for ck in (first, second) for c in store.manifest("j", ck).chunks
    }
    assert len(referenced) == 4
    orphans = set(store.objects.list(packs_prefix("j"))) - referenced
    assert len(orphans) == 2
    report = store.gc("j", dry_run=True)
    assert set(report.deleted_chunks) == orphans and report.dry_run
    report = store.gc("j")
    assert set(report.deleted_chunks) == orphans
    assert set(store.objects.list(packs_prefix("j"))) == referenced
    assert store.open_reader("j", first).read_all() == _state(4 * CHUNK, seed=1)

    report = store.gc("j", keep=1)
    assert report.deleted_checkpoints == (first,) and len(report.deleted_chunks) == 2
    assert store.open_reader("j").read_all() == _state(4 * CHUNK, seed=2)
    assert [r.checkpoint_id for r in store.list("j") if r.resumable] == [second]
    with pytest.raises(ValueError, match="at least 1"):
        store.gc("j", keep=0)
    store.gc("j", drop_incomplete=True)
    assert [r.state for r in store.list("j")] == [CheckpointState.COMPLETE]
    assert all(
        k.startswith(checkpoint_prefix("j", second))
        for k in store.objects.list("jobs/j/checkpoints/")
    )


def test_gc_keeps_a_pack_while_any_live_checkpoint_points_into_it(make_store: MakeStore) -> None:
    """A pack with a single chunk still referenced is kept whole, with its dead chunks."""
    from portal.testing import FakeClock

    clock = FakeClock()
    store = make_store("file", chunk_size=CHUNK, clock=clock)
    store.create_job_key("j")
    data = _state(8 * CHUNK, seed=4)
    first = _write(store, "j", data)  # one pack of eight chunks
    (first_pack,) = store.objects.list(packs_prefix("j"))
    clock.advance(10)
    changed = data[: 7 * CHUNK] + _state(CHUNK, seed=5)  # the last chunk changes
    second = _write(store, "j", changed)
    packs = store.objects.list(packs_prefix("j"))
    assert len(packs) == 2  # the second pack holds only the changed chunk
    assert len(store.backend.read_bytes(next(p for p in packs if p != first_pack))) == (
        CHUNK + CHUNK_OVERHEAD
    )
    report = store.gc("j", keep=1)
    assert report.deleted_checkpoints == (first,) and report.deleted_chunks == ()
    assert store.objects.list(packs_prefix("j")) == packs
    clock.advance(10)
    third = _write(store, "j", _state(8 * CHUNK, seed=6))  # shares nothing with the others
    report = store.gc("j", keep=1)
    assert report.deleted_checkpoints == (second,) and set(report.deleted_chunks) == set(packs)
    assert store.open_reader("j", third).read_all() == _state(8 * CHUNK, seed=6)


def test_parallel_writer_bounds_memory(make_store: MakeStore) -> None:
    """At most max_in_flight packs are pending: write() blocks instead of buffering everything."""
    import threading

    store = make_store("memory", chunk_size=CHUNK, pack_size=CHUNK, parallelism=2)
    store.create_job_key("j")
    gate = threading.Event()
    real_put = store.objects.put_pack
    peak = {"pending": 0}

    def slow_put(key: str, data: bytes | bytearray | memoryview) -> None:
        gate.wait(5)
        real_put(key, data)

    writer = store.open_writer("j", max_in_flight=3)
    store.objects.put_pack = slow_put  # type: ignore[method-assign]
    done = threading.Event()

    def produce() -> None:
        for i in range(10):
            writer.write(os.urandom(CHUNK))
            peak["pending"] = max(peak["pending"], i + 1)
        done.set()

    thread = threading.Thread(target=produce)
    thread.start()
    assert not done.wait(0.5)
    assert peak["pending"] <= 4  # three in flight, the fourth blocked in write()
    gate.set()
    thread.join(5)
    writer.commit()
    assert store.open_reader("j").manifest.total_size == 10 * CHUNK


def test_local_chunks_are_made_durable_once_before_the_manifest(tmp_path: Path) -> None:
    """Packs are written without waiting for the disk; one sync precedes the manifest."""
    from portal.storage import CheckpointStore
    from portal.storage.keys import FileKeyStore

    store = CheckpointStore(
        str(tmp_path / "store"), FileKeyStore(tmp_path / "keys"), chunk_size=1024, pack_size=2048
    )
    store.create_job_key("j")
    calls: list[str] = []
    backend = store.backend
    real_sync, real_write = backend.sync, backend.write_bytes

    def sync() -> None:
        calls.append(f"sync:{len(backend._unsynced)}")
        real_sync()

    def write_bytes(key: str, data: bytes) -> None:
        calls.append("manifest" if key.endswith("/manifest") else "put")
        real_write(key, data)

    backend.sync = sync  # type: ignore[method-assign]
    backend.write_bytes = write_bytes  # type: ignore[method-assign]
    with store.open_writer("j") as writer:
        writer.write(os.urandom(5000))
        writer.commit()
    assert calls[-2:] == ["sync:3", "manifest"]  # five chunks in three packs
    assert backend._unsynced == set()


def test_small_chunks_travel_in_few_large_requests(make_store: MakeStore) -> None:
    """64 chunks in packs of 16: four writes, and a reader's four ranged reads fetch them all."""
    store = make_store("memory", chunk_size=4096, pack_size=16 * 4096)
    store.create_job_key("j")
    backend = store.backend
    writes: list[str] = []
    reads: list[tuple[str, int, int]] = []
    real_write, real_range = backend.write_bytes, backend.read_range  # type: ignore[attr-defined]

    def write_bytes(key: str, data: bytes) -> None:
        writes.append(key)
        real_write(key, data)

    def read_range(key: str, start: int, end: int) -> bytes:
        reads.append((key, start, end))
        data: bytes = real_range(key, start, end)
        return data

    backend.write_bytes = write_bytes  # type: ignore[method-assign]
    backend.read_range = read_range  # type: ignore[attr-defined]
    data = _state(64 * 4096, seed=8)
    _write(store, "j", data)
    assert len([k for k in writes if "/packs/" in k]) == 4
    assert store.open_reader("j").read_all() == data
    assert len(reads) == 4 and all(start == 0 for _, start, _ in reads)
    assert all(end == 16 * (4096 + CHUNK_OVERHEAD) for _, _, end in reads)
