"""End-to-end helpers: the real `portal` CLI in subprocesses, on a PORTAL_HOME of the test's own."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SCRIPTS = Path(__file__).parent / "scripts"

# One seed for the run, fixed here, before pytest-xdist starts its workers (they inherit it):
# the seeded samples (which damage, which kill points) are drawn as the test modules are
# collected, and every worker must collect the same tests.
os.environ.setdefault("PORTAL_TEST_SEED", str(random.SystemRandom().randrange(1 << 30)))


def wait_until(what: str, test: Any, timeout: float = 60) -> Any:
    """Poll ``test()`` until it returns something true (returned), or fail naming ``what``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = test()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{what} never happened")


class PortalCli:
    def __init__(self, home: Path, workdir: Path) -> None:
        self.home = home
        self.workdir = workdir
        self.env = {**os.environ, "PORTAL_HOME": str(home), "PORTAL_DISABLE_PLUGIN_AUTOLOAD": "0"}

    def __call__(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "portal.cli", *args],
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "portal.cli", *args],
            cwd=self.workdir,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def plain(self, script: str, *args: str) -> str:
        return subprocess.run(
            [sys.executable, script, *args],
            cwd=self.workdir,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout

    def wait_for_output(self, job: str, needle: str, timeout: float = 30) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if needle in self("logs", job).stdout:
                return
            time.sleep(0.05)
        raise AssertionError(f"{needle!r} never appeared in the logs of {job}")

    def state(self, job: str) -> str:
        import json

        return str(json.loads(self("status", job, "--json").stdout)["state"])


@pytest.fixture
def portal(tmp_path: Path) -> Iterator[PortalCli]:
    workdir = tmp_path / "work"
    workdir.mkdir()
    for script in SCRIPTS.glob("*.py"):
        shutil.copy(script, workdir / script.name)
    cli = PortalCli(tmp_path / "home", workdir)
    yield cli
    # Leave no node or job process behind.
    for job in (tmp_path / "home" / "jobs").glob("*"):
        for pid_file in job.glob("attempts/*/node.pid"):
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid_file.read_text()), 9)
