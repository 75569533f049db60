"""Write a golden checkpoint set in tests/data/golden-vN (a fixed key, fixed ids and times).

    python make_golden.py v2

Run only when adding a new golden set for a new format; never rewrite an old one: the test that
reads it is what keeps old checkpoints readable. golden-v1 (manifest format 1, one object per
chunk) was written by the first release; golden-v2 (format 2, chunks in packs) by the next.
"""

from __future__ import annotations

import random
import shutil
import sys
from pathlib import Path

from portal.storage import CheckpointStore, MemoryKeyStore
from portal.testing import FakeClock

DATA = Path(__file__).parent / "data"
HERE = DATA / "golden-v1"
KEY = bytes(range(32))
JOB = "golden-job"


def plaintexts() -> tuple[bytes, bytes]:
    first = random.Random(4).randbytes(300)
    second = first[:200] + b"changed in the second checkpoint" + first[232:]
    return first, second


def main(version: str) -> None:
    if version == "v1":
        raise SystemExit("golden-v1 was written by the first release; it is never rewritten")
    here = DATA / f"golden-{version}"
    shutil.rmtree(here, ignore_errors=True)
    clock = FakeClock(start=1_800_000_000.0)
    store = CheckpointStore(
        str(here), MemoryKeyStore({JOB: KEY}), chunk_size=100, pack_size=200, clock=clock
    )
    for ckpt, data in zip(("golden-1", "golden-2"), plaintexts(), strict=True):
        with store.open_writer(JOB, checkpoint_id=ckpt) as writer:
            writer.write(data)
            writer.commit({"holds": "bytes", "size": len(data)})
        clock.advance(60)


if __name__ == "__main__":
    main(sys.argv[1])
