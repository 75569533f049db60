"""A full disk loses nothing: PORTAL_HOME or the store on a small real tmpfs.

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


def _mount(folder: Path, mb: int) -> None:
    folder.mkdir(exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={mb}m,mode=0700", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"a small tmpfs cannot be mounted here: {mounted.stderr.strip()}")


@pytest.fixture
def small_disks(tmp_path: Path) -> Iterator[tuple[PortalCli, Path]]:
    """The CLI, and a folder to mount small disks in (unmounted after the test)."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    shutil.copy(SCRIPTS / "big.py", workdir / "big.py")
    home = tmp_path / "home"
    cli = PortalCli(home, workdir)
    try:
        yield cli, tmp_path
    finally:
        for pid_file in home.glob("jobs/*/attempts/*/node.pid"):
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid_file.read_text()), 9)
        for folder in (tmp_path / "home", tmp_path / "store"):
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def _events(portal: PortalCli, job: str, kind: str) -> list[str]:
    return [line for line in portal("explain", job).stdout.splitlines() if f" {kind}: " in line]


def _store_files(store: Path, job: str) -> list[Path]:
    return [p for p in (store / "jobs" / job).rglob("*") if p.is_file()]


@pytest.mark.one_python
def test_a_checkpoint_larger_than_the_free_space_is_refused_and_the_job_goes_on(
    small_disks: tuple[PortalCli, Path],
) -> None:
    """PORTAL_HOME (attempt folders and the local store) on a 48 MB disk, 60 MB of state."""
    portal, _ = small_disks
    _mount(portal.home, DISK_MB)
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
    assert _store_files(portal.home / "store", job) == [], "a refused checkpoint left parts"
    assert not list(portal.home.glob("jobs/*/attempts/*/.*.tmp"))


@pytest.mark.one_python
def test_a_checkpoint_whose_upload_fills_the_disk_is_kept_and_stored_at_resume(
    small_disks: tuple[PortalCli, Path],
) -> None:
    """The store on a 20 MB disk of its own (PORTAL_STORAGE_URL), 26 MB of state: the file is
    written whole in the attempt folder, its upload cannot be."""
    portal, tmp = small_disks
    store = tmp / "store"
    _mount(store, 20)
    portal.env["PORTAL_STORAGE_URL"] = store.as_uri()
    size = str(26_000_000)
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
    assert not [p for p in _store_files(store, job) if "/packs/" in str(p)], (
        "the failed uploads' packs were left to fill the disk"
    )

    still_full = portal("resume", job)
    assert still_full.returncode == 69, still_full.stderr
    assert "could still not be stored" in still_full.stderr, still_full.stderr
    assert "Make room there" in still_full.stderr and "Traceback" not in still_full.stderr
    assert portal.state(job) == "suspended" and Path(kept["path"]).is_file()

    remount = subprocess.run(
        ["mount", "-o", "remount,size=64m", str(store)], capture_output=True, text=True
    )
    assert remount.returncode == 0, remount.stderr
    resumed = portal("resume", job)
    assert resumed.returncode == 0, resumed.stderr
    assert "kept locally when its upload failed" in resumed.stderr
    assert not Path(kept["path"]).exists()
    assert portal("logs", job).stdout == portal.plain("big.py", size)
