"""A real `portal server` on 127.0.0.1 per test (over SQLite in the test's own directory), raw
HTTP to it, and the real `portal` CLI in subprocesses."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from portal.server.testing import ServerProcess, running_server

SCRIPTS = Path(__file__).parent / "scripts"


def run_portal(home: Path, *args: str, env: Mapping[str, str] | None = None) -> Any:
    """``portal ARGS`` in a subprocess with ``home`` as its PORTAL_HOME and no other PORTAL_*
    setting of this shell's (``env`` adds some)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PORTAL_")}
    return subprocess.run(
        [sys.executable, "-m", "portal.cli", *args],
        env={**clean, "PORTAL_HOME": str(home), **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with running_server("sqlite", home=tmp_path / "server") as running:
        yield running


class Raw:
    """Plain HTTP requests to a server, headers and all: what a client other than Portal sends."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "", parts.port or 80

    def __call__(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, dict[str, str], Any]:
        """``(status, headers, JSON body or None)``."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=data, headers=sent)
            response = conn.getresponse()
            raw = response.read()
            got = {k.lower(): v for k, v in response.getheaders()}
        finally:
            conn.close()
        return response.status, got, json.loads(raw) if raw else None


@pytest.fixture
def raw(server: ServerProcess) -> Raw:
    return Raw(server.url)


class PortalCli:
    """`portal` as a user runs it, on one PORTAL_HOME and working directory."""

    def __init__(self, home: Path, workdir: Path, env: Mapping[str, str] | None = None) -> None:
        self.home = home
        self.workdir = workdir
        self.env = {**os.environ, "PORTAL_HOME": str(home), **(env or {})}
        for name in ("PORTAL_CONTROL_PLANE", "PORTAL_TOKEN", "PORTAL_CONTROL_DB"):
            if name not in (env or {}):
                self.env.pop(name, None)

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

    def wait_for_output(self, job: str, needle: str, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if needle in self("logs", job).stdout:
                return
            time.sleep(0.05)
        raise AssertionError(f"{needle!r} never appeared in the logs of {job}")

    def kill_leftovers(self) -> None:
        """Leave no node or job process behind."""
        for pid_file in (self.home / "jobs").glob("*/attempts/*/node.pid"):
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid_file.read_text()), 9)


@pytest.fixture
def make_cli(tmp_path: Path) -> Iterator[Any]:
    """``make_cli(name, env)``: a PortalCli with a home and a working directory of its own."""
    made: list[PortalCli] = []

    def make(name: str, env: Mapping[str, str] | None = None) -> PortalCli:
        workdir = tmp_path / name / "work"
        workdir.mkdir(parents=True)
        for script in SCRIPTS.glob("*.py"):
            shutil.copy(script, workdir / script.name)
        cli = PortalCli(tmp_path / name / "home", workdir, env)
        made.append(cli)
        return cli

    yield make
    for cli in made:
        cli.kill_leftovers()
