"""The real `portal` CLI in subprocesses on a PORTAL_HOME of the tests' own, the console served
from it, and the system's Chromium driven by Playwright (one browser per module)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SCRIPTS = Path(__file__).parent / "scripts"
ROOT = Path(__file__).resolve().parents[3]
ARTIFACTS = ROOT / "test-artifacts" / "console"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


class PortalCli:
    """`portal` as a user runs it, on one PORTAL_HOME and working directory."""

    def __init__(self, home: Path, workdir: Path) -> None:
        self.home = home
        self.workdir = workdir
        self.env = {
            **os.environ,
            "PORTAL_HOME": str(home),
            "PORTAL_CAPTURE_PROBE_EVERY_S": "0.3",
        }

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "portal.cli", *args]

    def __call__(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*args),
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def status(self, job: str) -> dict[str, Any]:
        result = self("status", job, "--json")
        assert result.returncode == 0, result.stderr
        return dict(json.loads(result.stdout))

    def wait_carry(self, job: str, key: str, timeout: float = 30) -> dict[str, Any]:
        end = time.monotonic() + timeout
        carry: dict[str, Any] = {}
        while time.monotonic() < end:
            carry = self.status(job)["carry"]
            if carry.get(key):
                return carry
            time.sleep(0.1)
        raise AssertionError(f"carry of {job} never had {key}: {carry}")

    def kill_nodes(self) -> None:
        """Leave no node or job process behind."""
        for pid_file in (self.home / "jobs").glob("*/attempts/*/node.pid"):
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


def _portal(base: Path) -> PortalCli:
    workdir = base / "work"
    workdir.mkdir(parents=True)
    for script in SCRIPTS.glob("*.py"):
        shutil.copy(script, workdir / script.name)
    return PortalCli(base / "home", workdir)


@pytest.fixture(scope="module")
def portal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PortalCli]:
    cli = _portal(tmp_path_factory.mktemp("portal"))
    yield cli
    cli.kill_nodes()


@contextlib.contextmanager
def console_on(portal: PortalCli) -> Iterator[str]:
    """`portal console --port 0` as ``portal`` runs it (its PORTAL_HOME and settings); its base
    URL while the block runs."""
    with console_announcing(portal) as address:
        yield address.split("?")[0].rstrip("/")


@contextlib.contextmanager
def console_announcing(
    portal: PortalCli, *flags: str, env: dict[str, str] | None = None
) -> Iterator[str]:
    """`portal console --port 0 FLAGS` (``env`` added to ``portal``'s); the address it printed
    (``?token=...`` included when it asks for one) while the block runs."""
    process = subprocess.Popen(
        [*portal.command("console", "--port", "0"), *flags],
        cwd=portal.workdir,
        env={**portal.env, **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    line = process.stderr.readline()
    found = re.search(r"console on (http://127\.0\.0\.1:\d+/\S*) ", line)
    if found is None:
        process.kill()
        raise AssertionError(f"portal console did not start: {line}{process.stderr.read()}")
    try:
        yield found.group(1)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
        finally:
            process.stderr.close()


@pytest.fixture(scope="module")
def console_url(portal: PortalCli) -> Iterator[str]:
    """`portal console --port 0` on the module's PORTAL_HOME; its base URL."""
    with console_on(portal) as url:
        yield url


def wait_state(portal: PortalCli, job: str, state: str, timeout: float = 60) -> None:
    """Until `portal status JOB` says ``state``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if portal.status(job)["state"] == state:
            return
        time.sleep(0.1)
    raise AssertionError(f"job {job} never became {state}: {portal.status(job)}")


def require_chromium() -> None:
    """Skip without Debian's Chromium, except under CI, which must run these tests."""
    if CHROMIUM.exists():
        return
    reason = f"{CHROMIUM} is absent: install it with `apt-get install -y chromium` (.ci/run does)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A fresh headless Chromium (a new profile), never a browser Playwright downloads."""
    require_chromium()
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1200, "height": 900},
        )
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    page = browser.new_page()
    page.set_default_timeout(30_000)
    yield page
    page.close()


def screenshot(page: Any, name: str) -> Path:
    """Save the page as a test artefact (test-artifacts/console/NAME.png at the repo root)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
