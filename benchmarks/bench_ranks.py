"""Multi-process jobs (``--nproc-per-node``): what a pause costs, and what Portal costs while
none is pending. Run: ``python benchmarks/bench_ranks.py [TRIALS]`` (torch installed; 3.11).

- **notice -> paused**: SIGTERM to the job's process until it exits 75 with its checkpoint
  written (for ranks: every part written, the set written, every rank gone), for W=2 and W=3
  ranks holding 64 MB of state between them, against one process holding the same 64 MB (the
  peer, under the same runtime). Median of TRIALS.
- **consensus**: from the request to the agreed safe point, drained, per rank (the set's
  manifest records it): median and max over every rank of every trial. It includes the ranks'
  arming, each polling the store for requests every 50 ms.
- **while nothing is pending**: the training loop's own time (start-up left out) of W=2 ranks
  launched by Portal against the same ranks launched by torchrun, alternated, median ratio.
"""

from __future__ import annotations

import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOB = Path(__file__).resolve().parent / "ranks_job.py"
STATE_MB = 64
TRIALS = int(sys.argv[1]) if len(sys.argv) > 1 else 5


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PORTAL_", "TORCHELASTIC"))}
    return {**env, "OMP_NUM_THREADS": "1"}


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def pause(world: int) -> tuple[float, list[float]]:
    """Seconds from SIGTERM to exit 75, and each rank's request-to-safe-point seconds."""
    from portal.runtime.rankset import read_manifest

    with tempfile.TemporaryDirectory() as folder:
        out, ck = Path(folder) / "out.txt", Path(folder) / "job.portal"
        launch = ["--nproc-per-node", str(world)] if world > 1 else []
        mode = "ddp" if world > 1 else "single"
        with out.open("wb") as sink:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "portal.runtime",
                    "run",
                    *launch,
                    "--checkpoint",
                    str(ck),
                    str(JOB),
                    mode,
                    "100000",
                    str(STATE_MB),
                ],
                stdout=sink,
                stderr=subprocess.DEVNULL,
                env=_env(),
                cwd=folder,
            )
        while _lines(out) < 30:
            time.sleep(0.01)
        sent = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=300)
        took = time.perf_counter() - sent
        if code != 75:
            raise SystemExit(f"W={world}: the job exited {code}, not 75")
        consensus = [p.seconds_to_safe_point for p in read_manifest(ck).parts] if world > 1 else []
        return took, consensus


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def loop_seconds(launcher: str, steps: int = 1500) -> float:
    if launcher == "portal":
        command = [sys.executable, "-m", "portal.runtime", "run", "--nproc-per-node", "2"]
    else:
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "1",
            "--nproc-per-node",
            "2",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(_port()),
        ]
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run(
            [*command, str(JOB), "ddp", str(steps), "1"],
            capture_output=True,
            text=True,
            env=_env(),
            cwd=folder,
            timeout=600,
        )
    if done.returncode != 0:
        raise SystemExit(f"{launcher}: exited {done.returncode}: {done.stderr[-2000:]}")
    last = done.stdout.strip().splitlines()[-1]
    return float(last.split()[1])


def main() -> None:
    print(f"multi-process jobs: {STATE_MB} MB of state, {TRIALS} trials, {os.cpu_count()} cores")
    single = statistics.median(pause(1)[0] for _ in range(TRIALS))
    print(f"  notice -> paused, one process:  {single * 1000:7.0f} ms (the peer)")
    for world in (2, 3):
        runs = [pause(world) for _ in range(TRIALS)]
        took = statistics.median(t for t, _ in runs)
        agreed = [c for _, cs in runs for c in cs]
        print(
            f"  notice -> paused, W={world} ranks:    {took * 1000:7.0f} ms "
            f"({took / single:.2f}x the peer); consensus median "
            f"{statistics.median(agreed) * 1000:.0f} ms, max {max(agreed) * 1000:.0f} ms"
        )
    ratios = []
    for _ in range(TRIALS):
        peer = loop_seconds("torchrun")
        ours = loop_seconds("portal")
        ratios.append(ours / peer)
    print(
        f"  while nothing is pending: Portal's launcher / torchrun's, W=2 training loop: "
        f"median {statistics.median(ratios):.3f}x (each: "
        + ", ".join(f"{r:.3f}" for r in ratios)
        + ")"
    )


if __name__ == "__main__":
    main()
