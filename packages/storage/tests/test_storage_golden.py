"""Checkpoints written by earlier releases (tests/data/golden-vN) stay readable, and new
checkpoints build on them."""

from __future__ import annotations

import shutil
from pathlib import Path

import make_golden as golden
import pytest

from portal.core.domain import CheckpointState
from portal.storage import CheckpointStore, MemoryKeyStore
from portal.storage.layout import chunks_prefix, packs_prefix
from portal.testing import FakeClock


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_golden_checkpoints_stay_readable(version: str) -> None:
    store = CheckpointStore(
        str(golden.DATA / f"golden-{version}"), MemoryKeyStore({golden.JOB: golden.KEY})
    )
    refs = store.list(golden.JOB, verify=True)
    assert [(r.checkpoint_id, r.state) for r in refs] == [
        ("golden-1", CheckpointState.COMPLETE),
        ("golden-2", CheckpointState.COMPLETE),
    ]
    assert [r.created_at for r in refs] == [1_800_000_000.0, 1_800_000_060.0]
    first, second = golden.plaintexts()
    assert store.open_reader(golden.JOB, "golden-1").read_all() == first
    reader = store.open_reader(golden.JOB)
    assert reader.checkpoint_id == "golden-2"
    assert reader.read_all() == second
    assert reader.manifest.summary == {"holds": "bytes", "size": len(second)}
    assert reader.manifest.parent == "golden-1"
    # the second checkpoint reuses chunks sealed by the first
    assert {c.sealed_in for c in reader.manifest.chunks} == {"golden-1", None}
    packed = [c.offset is not None for c in reader.manifest.chunks]
    # (``format`` itself is not checked: format-1 manifests omit it, so it reads as the default)
    assert all(packed) if version == "v2" else not any(packed)


def test_after_an_upgrade_old_checkpoints_read_and_gc_retires_them(tmp_path: Path) -> None:
    """A format-2 writer over a format-1 job: old checkpoints stay readable; the first new one
    shares nothing with them (its fingerprints are keyed BLAKE3, theirs HMAC-SHA256), the next
    new one dedups against it, and gc retires the old chunk objects with the old checkpoints."""
    root = tmp_path / "store"
    shutil.copytree(golden.DATA / "golden-v1", root)
    clock = FakeClock(start=1_800_000_600.0)
    store = CheckpointStore(
        str(root), MemoryKeyStore({golden.JOB: golden.KEY}), chunk_size=100, clock=clock
    )
    _, second = golden.plaintexts()
    third = second[:200] + b"x" * 100
    with store.open_writer(golden.JOB) as writer:
        writer.write(third)
        new = writer.commit().checkpoint_id
    manifest = store.manifest(golden.JOB, new)
    assert manifest.fingerprint_algorithm == "blake3-keyed"
    assert all(c.offset is not None for c in manifest.chunks)
    assert writer.progress().bytes_reused == 0
    clock.advance(60)
    with store.open_writer(golden.JOB) as writer:
        writer.write(third[:100] + b"y" * 100 + b"z" * 100)
        newer = writer.commit().checkpoint_id
    assert writer.progress().bytes_reused == 100
    assert store.open_reader(golden.JOB, "golden-2").read_all() == second
    report = store.gc(golden.JOB, keep=2)
    assert report.deleted_checkpoints == ("golden-1", "golden-2")
    assert store.objects.list(chunks_prefix(golden.JOB)) == []
    kept = {
        f"jobs/{golden.JOB}/{c.key}"
        for ck in (new, newer)
        for c in store.manifest(golden.JOB, ck).chunks
    }
    assert set(store.objects.list(packs_prefix(golden.JOB))) == kept
    assert store.open_reader(golden.JOB, new).read_all() == third


def test_a_reader_of_format_1_is_told_to_upgrade(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new manifest says its format, so a Portal that reads only format 1 refuses it with
    "upgrade" instead of misreading its packed chunks as corrupt ones."""
    import portal.storage.manifest as manifest_module
    from portal.core.errors import PortalError

    store = CheckpointStore(str(tmp_path / "store"), MemoryKeyStore())
    store.create_job_key("j")
    with store.open_writer("j") as writer:
        writer.write(b"state")
        ckpt = writer.commit().checkpoint_id
    assert store.manifest("j", ckpt).format == manifest_module.MANIFEST_FORMAT == 2
    monkeypatch.setattr(manifest_module, "MANIFEST_FORMAT", 1)
    with pytest.raises(PortalError, match=r"newer than this Portal reads \(1\): upgrade Portal"):
        store.manifest("j", ckpt)
