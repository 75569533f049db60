"""A writer killed (SIGKILL) at random moments never leaves a resumable partial checkpoint."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import storage_crash_writer as child

from portal.core.domain import CheckpointState
from portal.storage import CheckpointStore, FileKeyStore

WRITER = Path(child.__file__)


def _spawn(url: str, home: Path, seed: int, *extra: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), url, str(home), str(seed), *extra],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "ready" or proc.wait() == -signal.SIGKILL, line
    return proc


def _check(store: CheckpointStore, expected: dict[str, int], killed: str | None) -> str:
    """The killed checkpoint is incomplete, or complete and whole; the newest complete one (what a
    resume picks) reads back verified. Returns the killed checkpoint's state."""
    refs = store.list("crash-job")
    assert all(r.state is not CheckpointState.CORRUPT for r in refs), refs
    newest = refs[-1]
    state = newest.state.value
    if newest.resumable and newest.checkpoint_id not in expected:
        # killed after the manifest landed but before it said so: it must be whole
        assert killed is not None
        expected[newest.checkpoint_id] = int(killed)
    latest = store.latest_complete("crash-job")
    assert latest is not None
    assert store.open_reader("crash-job").read_all() == child.state(expected[latest.checkpoint_id])
    return state


def test_sigkill_at_random_moments(tmp_path: Path) -> None:
    url, home = str(tmp_path / "store"), tmp_path / "home"
    store = CheckpointStore(url, FileKeyStore(home), chunk_size=child.CHUNK)
    store.create_job_key("crash-job")
    proc = _spawn(url, home, 0)
    started = time.monotonic()
    out, _ = proc.communicate(timeout=60)
    upload_s = time.monotonic() - started
    assert proc.returncode == 0, out
    expected = {out.split()[-1]: 0}
    rng = random.Random(20261)
    outcomes: list[str] = []
    for attempt in range(1, 9):
        proc = _spawn(url, home, attempt)
        time.sleep(rng.uniform(0.0, upload_s * 0.8))
        proc.kill()
        out, _ = proc.communicate(timeout=30)
        if "committed" in out:
            expected[out.split()[-1]] = attempt
        outcomes.append(_check(store, expected, killed=str(attempt)))
    assert outcomes.count("incomplete") >= 3, outcomes  # most kills landed mid-upload
    assert len(store.list("crash-job", verify=True)) == 9


def test_sigkill_while_writing_the_manifest(tmp_path: Path) -> None:
    url, home = str(tmp_path / "store"), tmp_path / "home"
    store = CheckpointStore(url, FileKeyStore(home), chunk_size=child.CHUNK)
    store.create_job_key("crash-job")
    proc = _spawn(url, home, 0)
    out, _ = proc.communicate(timeout=60)
    good = out.split()[-1]
    proc = _spawn(url, home, 1, "kill-in-manifest")
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    refs = store.list("crash-job")
    assert [r.state for r in refs] == [CheckpointState.COMPLETE, CheckpointState.INCOMPLETE]
    latest = store.latest_complete("crash-job")
    assert latest is not None and latest.checkpoint_id == good
    assert store.open_reader("crash-job").read_all() == child.state(0)
    # the half-written manifest is a hidden temporary file, never the manifest itself
    leftovers = list((tmp_path / "store").rglob(".manifest*"))
    assert leftovers and all(".portal-tmp-" in p.name for p in leftovers)
