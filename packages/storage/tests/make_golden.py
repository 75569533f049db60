"""Regenerate the golden checkpoint in tests/data/golden-v1 (a fixed key, fixed ids and times).

Run only when adding a new golden set for a new format; never rewrite an old one: the test that
reads it is what keeps old checkpoints readable.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

from portal.core.testing import FakeClock
from portal.storage import CheckpointStore, MemoryKeyStore

HERE = Path(__file__).parent / "data" / "golden-v1"
KEY = bytes(range(32))
JOB = "golden-job"


def plaintexts() -> tuple[bytes, bytes]:
    first = random.Random(4).randbytes(300)
    second = first[:200] + b"changed in the second checkpoint" + first[232:]
    return first, second


def main() -> None:
    shutil.rmtree(HERE, ignore_errors=True)
    clock = FakeClock(start=1_800_000_000.0)
    store = CheckpointStore(str(HERE), MemoryKeyStore({JOB: KEY}), chunk_size=100, clock=clock)
    for ckpt, data in zip(("golden-1", "golden-2"), plaintexts(), strict=True):
        with store.open_writer(JOB, checkpoint_id=ckpt) as writer:
            writer.write(data)
            writer.commit({"holds": "bytes", "size": len(data)})
        clock.advance(60)


if __name__ == "__main__":
    main()
