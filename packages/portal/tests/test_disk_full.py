"""A full disk loses nothing: PORTAL_HOME (attempt folders, local store) on a small real tmpfs.

Two ways a disk runs out during a pause: the checkpoint itself does not fit (refused before a
byte is written: the job goes on, told what was needed and what was free), or the file fits but
its upload into the store on the same disk does not (the job's process has exited paused: the
whole file is kept, the job stays suspended, and the resume stores it once there is room).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import SCRIPTS, PortalCli

DISK_MB = 48


@pytest.fixture
def small_home(tmp_path: Path) -> Iterator[PortalCli]:
    home = tmp_path / "home"
    home.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m,mode=0700", "tmpfs", str(home)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"a small tmpfs cannot be mounted here: {mounted.stderr.strip()}")
    workdir = tmp_path / "work"
    workdir.mkdir()
    shutil.copy(SCRIPTS / "big.py", workdir / "big.py")
    cli = PortalCli(home, workdir)
    try:
        yield cli
    finally:
        for pid_file in home.glob("jobs/*/attempts/*/node.pid"):
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid_file.read_text()), 9)
        subprocess.run(["umount", "-l", str(home)], capture_output=True)


def _events(portal: PortalCli, job: str, kind: str) -> list[str]:
    return [line for line in portal("explain", job).stdout.splitlines() if f" {kind}: " in line]


def _store_files(portal: PortalCli, job: str) -> list[Path]:
    return [p for p in (portal.home / "store" / "jobs" / job).rglob("*") if p.is_file()]


@pytest.mark.one_python
def test_a_checkpoint_larger_than_the_free_space_is_refused_and_the_job_goes_on(
    small_home: PortalCli,
) -> None:
    portal = small_home
    size = str(60_000_000)  # more than the whole disk
    job = portal("run", "--detach", "big.py", size).stdout.strip()
    portal.wait_for_output(job, "step 12\n")
    portal("notice", job)
    assert portal("wait", job, "--timeout", "90").stdout.strip() == "done"
    failed = _events(portal, job, "pause-failed")
    assert len(failed) == 1, portal("explain", job).stdout
    assert "has no room for it: the checkpoint needs 60.0 MB" in failed[0], failed[0]
    assert " free; nothing was written" in failed[0] and "PORTAL_HOME" in failed[0], failed[0]
    assert "it has no complete checkpoint yet" in failed[0], failed[0]
    assert portal("logs", job).stdout == portal.plain("big.py", size)  # its output all there
    assert _store_files(portal, job) == [], "a refused checkpoint left parts in the store"
    assert not list(portal.home.glob("jobs/*/attempts/*/.*.tmp"))


@pytest.mark.one_python
def test_a_checkpoint_whose_upload_fills_the_disk_is_kept_and_stored_at_resume(
    small_home: PortalCli,
) -> None:
    portal = small_home
    size = str(26_000_000)  # the file fits; the file and its upload beside it do not
    job = portal("run", "--detach", "big.py", size).stdout.strip()
    portal.wait_for_output(job, "step 12\n")
    portal("notice", job)
    assert portal("wait", job, "--timeout", "90").stdout.strip() == "suspended", portal(
        "explain", job
    ).stdout
    upload = _events(portal, job, "upload-failed")
    assert len(upload) == 1 and "No space left on device" in upload[0], upload
    status = json.loads(portal("status", job, "--json").stdout)
    kept = status["kept_checkpoint"]
    assert kept is not None and Path(kept["path"]).is_file(), status
    assert status["last_checkpoint"] is None and status["incomplete_checkpoints"] == []
    assert "on this machine only" in portal("status", job).stdout
    assert not [p for p in _store_files(portal, job) if "/packs/" in str(p)], (
        "the failed uploads' packs were left to fill the disk"
    )

    still_full = portal("resume", job)
    assert still_full.returncode == 69, still_full.stderr
    assert "could still not be stored" in still_full.stderr, still_full.stderr
    assert "Make room there" in still_full.stderr and "Traceback" not in still_full.stderr
    assert portal.state(job) == "suspended" and Path(kept["path"]).is_file()

    remount = subprocess.run(
        ["mount", "-o", "remount,size=160m", str(portal.home)], capture_output=True, text=True
    )
    assert remount.returncode == 0, remount.stderr
    resumed = portal("resume", job)
    assert resumed.returncode == 0, resumed.stderr
    assert "kept locally when its upload failed" in resumed.stderr
    assert not Path(kept["path"]).exists()
    assert portal("logs", job).stdout == portal.plain("big.py", size)
