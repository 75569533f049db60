"""The whole local loop (run, notice, suspend, resume, status, jobs, explain, logs) through a
`portal server`, compared with the same commands on this machine's own store: same outputs,
but for job ids, checkpoint ids and times."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import PortalCli

from portal.control.remote import HttpControlStore
from portal.core.domain import AttemptState, JobState
from portal.server.testing import ServerProcess, running_server

_VARYING = [
    (re.compile(r"\bj-[0-9a-f]{10}\b"), "j-ID"),
    (re.compile(r"\blocal-[0-9a-f]{12}\b"), "local-NOTICE"),
    (re.compile(r"\b\d{8}T\d{6}(\.\d+)?Z-[0-9a-f]+\b"), "CHECKPOINT"),
    (re.compile(r"\b\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?Z?"), "DATETIME"),
    (re.compile(r"\b\d\d:\d\d:\d\d(\.\d+)?\b"), "TIME"),
    # `portal jobs`' ages and durations (9s ago, 1m30s)
    (re.compile(r"\b(\d+[dhm])?\d+[dhms]\b"), "AGE"),
    (re.compile(r"\b\d+(\.\d+)? ?(ms|s|min)\b"), "DURATION"),
    (re.compile(r"\b\d+(\.\d+)? ?(B|bytes|kB|MB|GB|KiB|MiB|GiB)\b"), "SIZE"),
    (re.compile(r"\b\d+ (second|minute|hour)s? ago\b"), "AGO"),
    (re.compile(r"/\S+/(local|remote)/"), "/DIR/"),
]


def _same_modulo_ids_and_times(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return type(value)(_same_modulo_ids_and_times(v) for v in value)
    if isinstance(value, str):
        for pattern, replacement in _VARYING:
            value = pattern.sub(replacement, value)
        # A table's column is as wide as its widest value, which the names above replaced.
        value = re.sub(r" {2,}", "  ", value)
    return value


def _portal_lines(stderr: str) -> list[str]:
    """Portal's own notes (the job's stderr interleaves with them at times of its own)."""
    return [line for line in stderr.splitlines() if line.startswith("portal: ")]


def _scenario(cli: PortalCli) -> dict[str, Any]:
    """run -> notice -> suspended -> resume -> done, and every reading command along the way."""
    seen: dict[str, Any] = {}
    run = cli.start("run", "--name", "count", "count.py", "7")
    cli.wait_for_output("count", "step 5 ")
    notice = cli("notice", "count", "--seconds", "120")
    seen["notice"] = (notice.returncode, notice.stdout, _portal_lines(notice.stderr))
    out, err = run.communicate(timeout=120)
    seen["run"] = (run.returncode, _portal_lines(err))
    for command in (("status", "count"), ("jobs",), ("explain", "count")):
        done = cli(*command)
        seen[" ".join(command) + " (suspended)"] = (done.returncode, done.stdout, done.stderr)
    resumed = cli("resume", "count")
    seen["resume"] = (resumed.returncode, _portal_lines(resumed.stderr))
    # Where the notice fell is the machine's timing; the output as a whole is not.
    seen["output"] = out + resumed.stdout
    for command in (
        ("status", "count"),
        ("jobs",),
        ("explain", "count"),
        ("logs", "count"),
        ("wait", "count"),
        ("resume", "count"),  # refused: the job is done
        ("status", "nope"),  # refused: no such job
    ):
        done = cli(*command)
        seen[" ".join(command)] = (done.returncode, done.stdout, done.stderr)
    return {k: _same_modulo_ids_and_times(v) for k, v in seen.items()}


def test_the_loop_through_a_server_reads_as_on_this_machine(
    server: ServerProcess, make_cli: Any
) -> None:
    local = make_cli("local")
    remote = make_cli("remote", server.env())
    expected = _scenario(local)
    got = _scenario(remote)
    assert got == expected
    assert expected["run"][0] == 75  # suspended, as the loop goes
    assert expected["resume"][0] == 0
    assert expected["output"] == local.plain("count.py", "7")
    # The records are the server's: nothing was written to the CLI machine's own store.
    assert not (remote.home / "portal.db").exists()
    store = HttpControlStore(server.url, token=server.token)
    job = store.get_job("count")
    assert job.state is JobState.DONE
    assert [a.state for a in store.attempts(job.id)] == [
        AttemptState.SUSPENDED,
        AttemptState.EXITED,
    ]
    store.close()


def test_a_config_file_names_the_server_for_every_command(
    server: ServerProcess, make_cli: Any
) -> None:
    cli = make_cli("configured")
    cli.home.mkdir(parents=True)
    (cli.home / "config.toml").write_text(
        f'control_plane = "{server.url}"\ncontrol_token = "{server.token}"\n'
    )
    done = cli("run", "--name", "quick", "count.py", "1")
    assert done.returncode == 0, done.stderr
    assert "quick" in cli("jobs").stdout
    assert not (cli.home / "portal.db").exists()
    store = HttpControlStore(server.url, token=server.token)
    assert store.get_job("quick").state is JobState.DONE
    store.close()
    # The environment wins over the file.
    other = cli.env.copy()
    cli.env["PORTAL_CONTROL_PLANE"] = "http://127.0.0.1:9"
    refused = cli("jobs")
    cli.env = other
    assert refused.returncode == 69
    assert "cannot reach the control plane at http://127.0.0.1:9" in refused.stderr


def test_the_store_behind_the_server_can_be_postgresql_too(tmp_path: Path) -> None:
    """Only when PostgreSQL is here: the shared suite in portal's tests covers it in depth."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "portal" / "tests"))
    try:
        from pg_server import postgres_server
    except ImportError:
        pytest.skip("portal's tests (pg_server.py) are not beside this package")
    try:
        pg_cm = postgres_server()
        pg = pg_cm.__enter__()
    except FileNotFoundError as why:
        pytest.skip(str(why))
    try:
        with running_server(pg.new_database(), home=tmp_path / "server") as server:
            store = HttpControlStore(server.url, token=server.token)
            assert store.version().store == "postgresql"
            assert store.list_jobs() == []
            store.close()
            assert "store postgresql://portal@127.0.0.1:" in server.log.read_text()
    finally:
        pg_cm.__exit__(None, None, None)
