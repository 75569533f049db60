"""A checkpoint written by an earlier release (tests/data/golden-v1) stays readable."""

from __future__ import annotations

import make_golden as golden

from portal.core.domain import CheckpointState
from portal.storage import CheckpointStore, MemoryKeyStore


def test_golden_checkpoints_stay_readable() -> None:
    store = CheckpointStore(str(golden.HERE), MemoryKeyStore({golden.JOB: golden.KEY}))
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
