"""How long the ranks of a DDP job take to agree where to pause. Run: ``python benchmarks/bench_ballot.py`` (torch installed; 3.11).

Each trial starts W real ranks (gloo, CPU, 127.0.0.1; ``packages/capture/tests/torch_scripts/
ballot_ranks.py``): a small DDP model with small buckets trains; from a given step a pause is due
and every rank, arriving skewed by up to 10 ms, calls ``agree()`` at its next safe point. The
figure per rank is the time from its call to the outcome (the ballot's wait for the slowest
rank included); the trial's figure is its slowest rank's. (The ballot is not called at all while
no pause is due; its cost then is measured once the runtime uses it, issue 27.)
"""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = (
    Path(__file__).resolve().parents[1] / "packages/capture/tests/torch_scripts/ballot_ranks.py"
)
TRIALS = 8
STEPS = 60


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def trial(world: int, pause_at: int, seed: int) -> tuple[float, list[dict]]:
    with tempfile.TemporaryDirectory() as folder:
        outs = [Path(folder) / f"{r}.json" for r in range(world)]
        port = _port()
        started = time.perf_counter()
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    str(SCRIPT),
                    str(r),
                    str(world),
                    str(port),
                    str(STEPS),
                    str(pause_at),
                    str(seed),
                    str(outs[r]),
                ],
                env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
                stderr=subprocess.DEVNULL,
            )
            for r in range(world)
        ]
        for proc in procs:
            proc.wait(timeout=120)
        took = time.perf_counter() - started
        return took, [json.loads(o.read_text()) for o in outs]


def main() -> None:
    for world in (2, 3):
        slowest = []
        for seed in range(TRIALS):
            _, results = trial(world, pause_at=STEPS // 2, seed=seed)
            slowest.append(max(max(r["agree_s"]) for r in results))
        print(
            f"W={world}: consensus median {statistics.median(slowest) * 1000:.1f} ms, "
            f"max {max(slowest) * 1000:.1f} ms over {TRIALS} pauses (slowest rank of each)"
        )


if __name__ == "__main__":
    main()
