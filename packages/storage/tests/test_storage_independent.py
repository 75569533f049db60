"""Independent restore points: every N-th checkpoint shares no chunk with those before it, so one
damaged chunk reaches at most N checkpoints and an intact one always exists before it."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from portal.storage import CheckpointStore
from portal.storage.errors import CheckpointCorruptError
from portal.storage.layout import packs_prefix

MakeStore = Callable[..., CheckpointStore]
CHUNK = 64 * 1024


def _write(store: CheckpointStore, job: str, data: bytes) -> str:
    with store.open_writer(job) as writer:
        writer.write(data)
        return writer.commit().checkpoint_id


def test_every_nth_checkpoint_is_a_full_copy(make_store: MakeStore) -> None:
    store = make_store("memory", chunk_size=CHUNK, pack_size=CHUNK, independent_every=3)
    store.create_job_key("j")
    state = os.urandom(8 * CHUNK)  # unchanged: everything could be shared
    ids = [_write(store, "j", state) for _ in range(7)]
    parents = [store.manifest("j", c).parent for c in ids]
    assert parents == [None, ids[0], ids[1], None, ids[3], ids[4], None]
    sealers = [{e.sealed_in or c for e in store.manifest("j", c).chunks} for c in ids]
    # Each checkpoint's chunks were sealed within its own line of at most three.
    assert sealers == [{ids[0]}, {ids[0]}, {ids[0]}, {ids[3]}, {ids[3]}, {ids[3]}, {ids[6]}]
    assert all(store.open_reader("j", c).read_all() == state for c in ids)


def test_one_damaged_pack_leaves_the_next_line_intact(
    make_store: MakeStore, tmp_path: Path
) -> None:
    store = make_store("file", chunk_size=CHUNK, pack_size=CHUNK, independent_every=2)
    store.create_job_key("j")
    state = os.urandom(4 * CHUNK)
    first = _write(store, "j", state)
    first_packs = set(store.objects.list(packs_prefix("j")))
    ids = [first, *(_write(store, "j", state) for _ in range(2))]
    root = store.local_root
    assert root is not None
    victim = root / sorted(first_packs)[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 1
    victim.write_bytes(bytes(data))
    for damaged in ids[:2]:  # the first and the one that shares its chunks
        with pytest.raises(CheckpointCorruptError):
            store.open_reader("j", damaged).verify()
    assert store.open_reader("j", ids[2]).read_all() == state  # its own copy


def test_independent_every_must_be_a_count(make_store: MakeStore) -> None:
    with pytest.raises(ValueError, match="independent_every must be at least 1 checkpoint"):
        make_store("memory", independent_every=0)


def test_a_checkpoint_against_a_deadline_defers_the_full_copy(make_store: MakeStore) -> None:
    """A notice's checkpoint uploads only what changed, even when a full copy is due: the whole
    state could miss the notice. The next checkpoint without a deadline is the full copy."""
    store = make_store("memory", chunk_size=CHUNK, pack_size=CHUNK, independent_every=2)
    store.create_job_key("j")
    state = os.urandom(8 * CHUNK)
    first = _write(store, "j", state)
    second = _write(store, "j", state)
    with store.open_writer("j", deadline=time.time() + 120) as writer:
        writer.write(state)
        noticed = writer.commit()
        assert writer.progress().bytes_uploaded < CHUNK  # its manifest only: nothing changed
    assert store.manifest("j", noticed.checkpoint_id).parent == second
    later = _write(store, "j", state)
    assert store.manifest("j", second).parent == first
    assert store.manifest("j", later).parent is None
    assert store.open_reader("j", noticed.checkpoint_id).read_all() == state
