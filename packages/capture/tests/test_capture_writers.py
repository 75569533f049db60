"""Objects that own a thread, carried: a TensorBoard ``SummaryWriter`` in a global (its event
writer's thread and queue) no longer keeps a job from pausing. Paused mid-run and resumed in a
new process, the script's output is an uninterrupted run's, and its log directory holds the same
event files (one per writer: each resumed writer appends to its own) with every scalar an
uninterrupted run writes.
torch and tensorboard: Python 3.11 (the local CPU torch's), skipped elsewhere."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _harness import CORPUS, EXIT_PAUSED, pause_when, resume_noted, tensorboard_scalars

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("torch", "tensorboard")),
    reason="needs torch (the local CPU build) and tensorboard (noxfile.py's FRAMEWORK_PINS)",
)


@pytest.mark.parametrize("steps", [7, 31])
def test_a_summary_writer_in_a_global_pauses_and_appends_to_its_file(
    tmp_path: Path, steps: int
) -> None:
    plain_dir, job = tmp_path / "plain", tmp_path / "job"
    for where in (plain_dir, job):
        where.mkdir()
        shutil.copy(CORPUS / "writers" / "tb_global.py", where / "train.py")
    plain = subprocess.run(
        [sys.executable, "train.py"], cwd=plain_dir, capture_output=True, timeout=120, check=True
    )
    paused = pause_when(
        job / "train.py",
        ready=lambda out: out.count(b"step ") >= steps,
        cwd=job,
        timeout=120,
    )
    assert paused.events[-1]["event"] == "paused", (paused.events, paused.err.decode()[-2000:])
    assert paused.returncode == EXIT_PAUSED
    after, _, _ = resume_noted(paused.checkpoint, job)
    assert paused.out + after == plain.stdout
    # One file per writer (add_scalars makes one per tag), as the uninterrupted run leaves.
    assert tensorboard_scalars(job / "runs") == tensorboard_scalars(plain_dir / "runs")
