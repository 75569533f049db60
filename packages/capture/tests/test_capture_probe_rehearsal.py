"""``capture_probe = full``: with ``--probe-rehearsal`` each check also writes a real checkpoint
beside the checkpoint path, measures it and deletes it; its report gives the checkpoint's size
on disk (out-of-band buffers included, which a walk alone does not count)."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from _harness import connect, runtime, short_dir

SCRIPT = """
import time

total = 0
for step in range(300):
    total += step
    time.sleep(0.01)
print("final", total)
"""


@pytest.mark.parametrize("rehearse", [True, False])
def test_a_rehearsal_measures_the_whole_checkpoint_and_leaves_nothing(
    tmp_path: Path, rehearse: bool
) -> None:
    (tmp_path / "job.py").write_text(textwrap.dedent(SCRIPT))
    (tmp_path / "data.bin").write_bytes(os.urandom(1 << 20))  # travels out of band
    sock = os.path.join(short_dir(), "c.sock")
    checkpoint = tmp_path / "ck" / "job.portal"
    flags = ["--probe-rehearsal"] if rehearse else []
    proc = subprocess.Popen(
        runtime("run", "--control", sock, "--checkpoint", str(checkpoint), *flags, "job.py"),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    control = connect(proc, sock)
    assert control is not None
    try:
        control.send({"op": "probe"})
        report = control.events_until({"probe"})[-1]
    finally:
        out, err = proc.communicate(timeout=60)
        control.close()
    assert proc.returncode == 0, err.decode()
    assert out == b"final 44850\n"
    assert report.get("problems", []) == [] and not report.get("partial")
    # The file's bytes count either way: on disk (a rehearsal) or as the out-of-band buffers the
    # walk produced (what a checkpoint would hold: the policies' measure).
    assert report["checked_bytes"] > 1 << 20
    assert not checkpoint.parent.exists() or list(checkpoint.parent.iterdir()) == []
