"""Periodic checkpoints at the runtime: ``{"op": "checkpoint", "path": ...}`` writes a whole
checkpoint at the next safe point and the program runs on; resuming from that file continues
from the statement after that safe point, exactly as from a pause's checkpoint."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

from _harness import EXIT_PAUSED, connect, runtime, short_dir

SCRIPT = """
import sys
import time

total = 0
for step in range(int(sys.argv[1])):
    total += step * step
    print(f"step {step} total {total}", flush=True)
    time.sleep(0.01)
print("final", total)
"""
STEPS = 150


def _expected() -> list[str]:
    total, lines = 0, []
    for step in range(STEPS):
        total += step * step
        lines.append(f"step {step} total {total}")
    return [*lines, f"final {total}"]


def _start(tmp_path: Path, sock: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        runtime(*args),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PORTAL_RUNTIME_CONTROL": sock},
    )


def test_a_periodic_checkpoint_runs_on_and_resumes_after_its_safe_point(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(textwrap.dedent(SCRIPT))
    sock = os.path.join(short_dir(), "c.sock")
    periodic = tmp_path / "periodic-1.portal"
    proc = _start(tmp_path, sock, "run", "job.py", str(STEPS))
    control = connect(proc, sock)
    assert control is not None
    try:
        control.send({"op": "checkpoint", "path": str(periodic)})
        done = control.events_until({"checkpointed", "not-checkpointed"})[-1]
    finally:
        out, err = proc.communicate(timeout=60)
        control.close()
    # The program ran on to its end, its output untouched by the checkpoint.
    assert proc.returncode == 0, err.decode()
    assert out.decode().splitlines() == _expected()
    assert done["event"] == "checkpointed", done
    assert done["checkpoint"] == str(periodic) and done["bytes"] == periodic.stat().st_size
    assert done["where"].startswith("job.py:") and done["stall_seconds"] >= 0

    # Resuming from it repeats exactly the lines printed after its safe point.
    resumed = subprocess.run(
        runtime("resume", "--checkpoint", str(tmp_path / "next.portal"), str(periodic)),
        cwd=tmp_path,
        capture_output=True,
        timeout=60,
    )
    assert resumed.returncode == 0, resumed.stderr.decode()
    tail = resumed.stdout.decode().splitlines()
    assert 0 < len(tail) <= len(_expected())
    assert tail == _expected()[-len(tail) :]


def test_a_pause_asked_during_a_periodic_checkpoint_wins(tmp_path: Path) -> None:
    """The pause is never delayed by the periodic checkpoint: asked together, the process
    pauses (exit 75) at that safe point and its checkpoint resumes to the same result."""
    (tmp_path / "job.py").write_text(textwrap.dedent(SCRIPT))
    (tmp_path / "data.bin").write_bytes(os.urandom(8 << 20))  # a state that takes a moment
    sock = os.path.join(short_dir(), "c.sock")
    checkpoint = tmp_path / "job.portal"
    proc = _start(tmp_path, sock, "run", "--checkpoint", str(checkpoint), "job.py", str(STEPS))
    control = connect(proc, sock)
    assert control is not None
    try:
        control.send({"op": "checkpoint", "path": str(tmp_path / "periodic-1.portal")})
        control.pause()
        events = control.events_until({"paused"})
    finally:
        first, err = proc.communicate(timeout=60)
        control.close()
    assert proc.returncode == EXIT_PAUSED, err.decode()
    kinds = [e["event"] for e in events]
    assert kinds[-1] == "paused"
    resumed = subprocess.run(
        runtime("resume", str(checkpoint)), cwd=tmp_path, capture_output=True, timeout=60
    )
    assert resumed.returncode == 0, resumed.stderr.decode()
    # A pause's checkpoint: no line is repeated or lost.
    assert (first + resumed.stdout).decode().splitlines() == _expected()
