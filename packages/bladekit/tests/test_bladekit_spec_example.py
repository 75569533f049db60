"""The spec's "Checkpoint/resume pattern" example, unchanged, end to end in a real script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "scripts" / "spec_trainer.py"
SPEC = Path("/work/shared/spec/bladekit-preemption-and-checkpoints.txt")


def _example_in(text: str) -> str:
    start = text.index("import bladekit\n\napp = bladekit.app(")
    end = text.index("        return loss\n", start) + len("        return loss\n")
    return text[start:end]


@pytest.mark.skipif(not SPEC.exists(), reason="the shared spec is not on this machine")
def test_script_holds_the_spec_example_unchanged() -> None:
    assert _example_in(SCRIPT.read_text()) == _example_in(SPEC.read_text())


def _can_mount_ckpt() -> bool:
    """A private mount namespace (no root needed), else a real /ckpt that may be created."""
    with tempfile.TemporaryDirectory() as folder:
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                "import bladekit._namespace as n, pathlib, sys; d = pathlib.Path(sys.argv[1]);"
                "n.enter([('/ckpt', d / 'v')], scratch=d / 'root')",
                folder,
            ],
            capture_output=True,
        )
    return probe.returncode == 0 or Path("/ckpt").exists() or os.access("/", os.W_OK)


@pytest.mark.skipif(not _can_mount_ckpt(), reason="no mount namespace, and cannot create /ckpt")
@pytest.mark.parametrize("seed", [1, 2])
def test_trainer_resumes_across_random_preemptions(portal_home: Path, seed: int) -> None:
    steps = 12
    env = dict(os.environ, PORTAL_HOME=str(portal_home))
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(steps), str(seed)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # The step counter and the model continued: every batch seen once, in order, never from zero.
    assert result["step"] == steps
    assert result["seen"] == [float(i) for i in range(steps)]
    weight = 1.0
    for i in range(steps):
        weight = weight * 0.9 + i
    assert result["weight"] == pytest.approx(weight)
    assert result["interruptions"] == 4 and result["attempts"] == 4
    assert result["events"].count("preempted") == 4
    assert result["mount_left"] is False  # the runner removed /ckpt after the last attempt
    # The committed volume lives in the store under PORTAL_HOME, as portal-storage decides.
    assert (portal_home / "store" / "volumes" / "resnet-ckpts" / "manifest").exists()
