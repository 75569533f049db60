"""Benchmark of periodic checkpoints: how long the script stalls for one, against the time a full
pause-and-exit takes (a notice, until the process has exited and its checkpoint is stored).

    python benchmarks/bench_periodic.py                 # ~50 MB and ~200 MB of state
    python benchmarks/bench_periodic.py --sizes-mb 20

Both run through the real ``portal`` CLI and node, with a local store under a temporary
``PORTAL_HOME``. The job holds a numpy array of SIZE MB (random, so nothing compresses) and
changes a little of it at every step. It runs with ``--checkpoint-every``; the stall is what the
runtime measured for each periodic checkpoint (the script held while its state is captured and
written to the local disk; the upload runs beside the job afterwards). The first is a full
upload, the next ones incremental. Then a notice: the pause-and-exit is the time from
``portal notice`` to the ``suspended`` event (checkpoint written, process exited, upload done).
Prints both and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

JOB = """
import sys
import time

import numpy as np

state = np.random.default_rng(7).random(int(sys.argv[1]) * 10**6 // 8)
step = 0
while True:
    step += 1
    state[(step * 4099) % state.size] = step
    time.sleep(0.005)
"""


def _portal(env: dict[str, str], cwd: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "portal.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode not in (0, 75):
        raise SystemExit(f"portal {' '.join(args)} failed: {done.stderr}")
    return done.stdout


def _events(home: Path, job: str, kind: str) -> list[Any]:
    from portal.control.plane import ControlPlane
    from portal.core.settings import Settings

    plane = ControlPlane(Settings.load({"home": str(home)}, environ={}))
    try:
        return [e for _, e in plane.store.events(job) if e.kind == kind]
    finally:
        plane.store.close()


def _holding(events: list[Any], size_mb: int) -> list[Any]:
    """The periodic checkpoints taken once the state existed (not during numpy's import)."""
    return [e for e in events if e.data["bytes"] >= size_mb * 10**6 * 0.9]


def _wait(what: str, test: Any, timeout: float = 300) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = test()
        if found:
            return found
        time.sleep(0.1)
    raise SystemExit(f"{what} did not happen within {timeout:g} s")


def measure(size_mb: int, every_s: float, count: int, work: Path) -> dict[str, float]:
    home = work / f"home-{size_mb}"
    cwd = work / f"work-{size_mb}"
    cwd.mkdir(parents=True)
    (cwd / "job.py").write_text(JOB)
    env = {**os.environ, "PORTAL_HOME": str(home)}
    env.pop("PORTAL_CHECKPOINT_EVERY", None)
    job = _portal(
        env, cwd, "run", "--detach", f"--checkpoint-every={every_s:g}", "job.py", str(size_mb)
    ).strip()
    try:
        periodic = _wait(
            f"{count} periodic checkpoints of {size_mb} MB",
            lambda: (
                (found := _holding(_events(home, job, "checkpoint-periodic"), size_mb))[count - 1 :]
                and found
            ),
        )
        stalls = [float(e.data["stall_seconds"]) for e in periodic[:count]]
        uploads = [float(e.data["upload_seconds"]) for e in periodic[:count]]
        started = time.time()
        _portal(env, cwd, "notice", job, "--seconds", "600")
        suspended = _wait("the suspend", lambda: _events(home, job, "suspended"))[0]
    finally:  # never leave the endless job running
        subprocess.run(
            [sys.executable, "-m", "portal.cli", "cancel", job], env=env, capture_output=True
        )
    return {
        "bytes": float(periodic[0].data["bytes"]),
        "first_stall": stalls[0],
        "stall": statistics.median(stalls[1:] or stalls),
        "upload": statistics.median(uploads[1:] or uploads),
        "pause_exit": suspended.at - started,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--count", type=int, default=3, help="periodic checkpoints per size")
    options = parser.parse_args()
    try:
        import numpy  # noqa: F401
    except ImportError:
        print("bench_periodic: numpy is not installed; skipped")
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="portal-bench-periodic-") as tmp:
        for size in options.sizes_mb:
            every = max(2.0, size / 25)  # room for the upload between two checkpoints
            rows.append((size, measure(size, every, options.count, Path(tmp))))
    print("periodic checkpoint stall vs pause-and-exit (notice -> exited and stored):")
    for size, r in rows:
        print(
            f"  {size:4d} MB state ({r['bytes'] / 1e6:6.1f} MB image): stall "
            f"{r['stall'] * 1000:7.0f} ms (first {r['first_stall'] * 1000:.0f} ms; upload beside "
            f"the job {r['upload']:.2f} s), pause-and-exit {r['pause_exit']:6.2f} s, "
            f"ratio stall/pause-and-exit {r['stall'] / r['pause_exit']:5.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
