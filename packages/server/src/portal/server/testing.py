"""A real ``portal server`` process on 127.0.0.1 for tests (ours and those of code built on it).

:func:`running_server` makes a token, starts ``python -m portal.cli server`` on a free port of
127.0.0.1 over the store ``db`` names, waits for its announcement, yields its address and token,
and stops it (SIGTERM, then SIGKILL) when the block ends. Its log is ``server.log`` in ``home``.

The token is an admin's unless asked otherwise: a suite written against a store (which has no
roles: every caller may do everything) runs through the service unchanged, reclaims included,
which a plain user's token may not record.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import attrs

from portal.server.cli import TOKENS_NAME
from portal.server.tokens import TokenFile

__all__ = ["ServerProcess", "running_server"]

_ANNOUNCED = re.compile(r"control plane on (https?://\S+) ")


@attrs.frozen
class ServerProcess:
    """A started server: its base URL, a valid token, its home, log and process."""

    url: str
    token: str = attrs.field(repr=False)
    home: Path
    log: Path
    process: subprocess.Popen[bytes] = attrs.field(repr=False)

    @property
    def tokens(self) -> TokenFile:
        return TokenFile(self.home / TOKENS_NAME)

    def env(self) -> dict[str, str]:
        """What a CLI or node process needs to use this server."""
        return {"PORTAL_CONTROL_PLANE": self.url, "PORTAL_TOKEN": self.token}


@contextlib.contextmanager
def running_server(
    db: str,
    *,
    home: Path,
    user: str = "tester",
    role: str = "admin",
    port: int = 0,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    args: Sequence[str] = (),
) -> Iterator[ServerProcess]:
    """A ``portal server`` over ``db`` (``sqlite``, a SQLite path or a postgresql:// URL) with
    ``home`` as its PORTAL_HOME, on ``port`` (0: a free one), running for the block. ``user``
    gets a new token of ``role`` (``admin``: every job, and reclaims; ``user``: its own jobs),
    replacing any earlier one of theirs; ``args``: more of the server's options
    (``--tls-cert``, say)."""
    home.mkdir(parents=True, exist_ok=True)
    token, _ = TokenFile(home / TOKENS_NAME).create(user, role=role)
    log = home / "server.log"
    child_env = {**os.environ, **(env or {}), "PORTAL_HOME": str(home)}
    for name in ("PORTAL_CONTROL_PLANE", "PORTAL_TOKEN"):  # the server is the control plane
        child_env.pop(name, None)
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "portal.cli", "server", "--db", db, "--port", str(port), *args],
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url = _wait_for_announcement(process, log, timeout)
        yield ServerProcess(url=url, token=token, home=home, log=log, process=process)
    finally:
        _stop(process)


def _wait_for_announcement(process: subprocess.Popen[bytes], log: Path, timeout: float) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = _ANNOUNCED.search(log.read_text(errors="replace"))
        if found:
            return found.group(1)
        if process.poll() is not None:
            raise RuntimeError(
                f"portal server exited with {process.returncode}:\n{log.read_text()}"
            )
        time.sleep(0.02)
    raise RuntimeError(
        f"portal server did not announce itself in {timeout:g} s:\n{log.read_text()}"
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)
