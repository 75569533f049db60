"""The working directory's files travel with the checkpoint: a script that writes and appends
files in its directory, paused and resumed in a fresh empty directory (a new machine), leaves
the same files and prints the same as an uninterrupted run; ``.portalignore`` is honoured; a
resume that would write outside the directory is refused, naming the entry."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from _harness import CORPUS, EXIT_PAUSED, EXIT_REFUSED, Control, connect, runtime, short_dir

SCRIPT = CORPUS / "workdir" / "writes_files.py"
STEPS = "60"


def _job_dir(path: Path) -> Path:
    path.mkdir()
    shutil.copy(SCRIPT, path / "job.py")
    (path / ".portalignore").write_text("# scratch space\ncache/\n")
    return path


def _drain(proc: subprocess.Popen[bytes]) -> tuple[bytes, bytes]:
    """The rest of stdout through the reader ``readline`` used (communicate() would skip what it
    had read ahead), then stderr, once the process ends."""
    assert proc.stdout is not None and proc.stderr is not None
    with proc.stdout, proc.stderr:
        out, err = proc.stdout.read(), proc.stderr.read()
    proc.wait(timeout=60)
    return out, err


def _paused_run(tmp: Path) -> tuple[Path, Path, bytes]:
    """Run in ``tmp/a`` until step 10, pause; the checkpoint, the directory and the output."""
    first = _job_dir(tmp / "a")
    sock = os.path.join(short_dir(), "c.sock")
    checkpoint = tmp / "ck" / "job.portal"
    checkpoint.parent.mkdir()
    proc = subprocess.Popen(
        runtime("run", "--control", sock, "--checkpoint", str(checkpoint), "job.py", STEPS),
        cwd=first,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    control = connect(proc, sock)
    assert control is not None and proc.stdout is not None
    out = b""
    while not out.startswith(b"10 ") and b"\n10 " not in out:
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else b""
        out += line
    Control.pause(control, within=30)
    rest, err = _drain(proc)
    control.close()
    assert proc.returncode == EXIT_PAUSED, err.decode()
    return checkpoint, first, out + rest


def test_resumed_in_a_fresh_directory_the_files_are_there(tmp_path: Path) -> None:
    plain_dir = _job_dir(tmp_path / "plain")
    expected = subprocess.run(
        [sys.executable, "job.py", STEPS], cwd=plain_dir, capture_output=True, check=True
    ).stdout
    checkpoint, first, before = _paused_run(tmp_path)
    log_before = (first / "log.txt").read_text()

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    resumed = subprocess.run(
        runtime("resume", str(checkpoint)), cwd=fresh, capture_output=True, timeout=60
    )
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert before + resumed.stdout == expected
    assert (fresh / "log.txt").read_text() == (plain_dir / "log.txt").read_text()
    assert os.readlink(fresh / "latest") == "out/deep/latest.txt"
    assert (fresh / "empty").is_dir()
    # .portalignore: the scratch file travelled not; only the steps after the resume are in it
    seen = (fresh / "cache" / "seen.txt").read_text().split()
    assert seen[0] != "0" and seen[-1] == str(int(STEPS) - 1)
    # the old directory was left alone: the resumed job wrote into its own
    assert (first / "log.txt").read_text() == log_before


def test_a_resume_that_would_write_through_a_link_outside_is_refused(tmp_path: Path) -> None:
    checkpoint, _, _ = _paused_run(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    target = tmp_path / "target"
    target.mkdir()
    os.symlink(outside, target / "out")  # the new directory's "out" leads outside it
    refused = subprocess.run(
        runtime("resume", str(checkpoint)), cwd=target, capture_output=True, timeout=60
    )
    assert refused.returncode == EXIT_REFUSED
    message = refused.stderr.decode()
    assert "CAPTURE_UNSAFE_WORKDIR_ENTRY" in message and "'out/" in message, message
    assert list(outside.iterdir()) == []
    assert sorted(p.name for p in target.iterdir()) == ["out"]  # nothing written at all
    assert refused.stdout == b""
