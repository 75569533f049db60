"""A real, throwaway PostgreSQL server on 127.0.0.1 for tests and benchmarks.

Uses Debian's ``postgresql`` package (``/usr/lib/postgresql/<version>/bin``). ``initdb`` refuses
to run as root, so as root the server runs as the ``postgres`` user in a directory it owns. No
durability is wanted (``fsync=off``, ``--no-sync``): the server lives as long as the test session.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["PostgresServer", "find_postgres_bin", "postgres_server"]

_USER = "portal"


def find_postgres_bin() -> Path | None:
    """The newest installed PostgreSQL's ``bin`` directory, or None when there is none."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/postgres"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    return found[-1].parent if found else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PostgresServer:
    """One running server; :meth:`new_database` hands each test a database of its own."""

    def __init__(self, bin_dir: Path, root: Path, port: int, run_as: list[str]) -> None:
        self.bin_dir = bin_dir
        self.root = root
        self.port = port
        self._run_as = run_as
        self._names = itertools.count(1)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{_USER}@127.0.0.1:{self.port}/{database}"

    def _pg(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self._run_as, str(self.bin_dir / tool), *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def new_database(self, prefix: str = "t") -> str:
        """A fresh, empty database; returns its URL."""
        import psycopg

        name = f"{prefix}_{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        return self.url(name)

    def start(self) -> None:
        data, sockets = self.root / "data", self.root / "sock"
        init = self._pg(
            "initdb",
            "-D",
            str(data),
            "-A",
            "trust",
            "-U",
            _USER,
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        )
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed:\n{init.stdout}\n{init.stderr}")
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {sockets} -c fsync=off "
            f"-c full_page_writes=off -c max_connections=200"
        )
        started = self._pg(
            "pg_ctl",
            "-D",
            str(data),
            "-l",
            str(self.root / "server.log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )
        if started.returncode != 0:
            log = (self.root / "server.log").read_text(errors="replace")
            raise RuntimeError(f"pg_ctl start failed:\n{started.stdout}\n{started.stderr}\n{log}")

    def stop(self) -> None:
        self._pg("pg_ctl", "-D", str(self.root / "data"), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """Start a server (``initdb`` + ``pg_ctl start``), yield it, stop it and remove its files.

    Raises FileNotFoundError when PostgreSQL is not installed (callers decide: skip or fail).
    """
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        raise FileNotFoundError(
            "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/postgres): "
            "apt-get install postgresql"
        )
    root = Path(tempfile.mkdtemp(prefix="portal-pg-"))
    run_as: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root: hand the directory to the postgres user
        account = pwd.getpwnam("postgres")
        os.chown(root, account.pw_uid, account.pw_gid)
        run_as = ["runuser", "-u", "postgres", "--"]
    if run_as:
        _mkdir_as(run_as, root / "sock")
    else:
        (root / "sock").mkdir()
    server = PostgresServer(bin_dir, root, _free_port(), run_as)
    try:
        server.start()
        yield server
    finally:
        server.stop()


def _mkdir_as(run_as: list[str], path: Path) -> None:
    subprocess.run([*run_as, "mkdir", "-p", str(path)], check=True, timeout=30)
