"""`portal server` and `portal server token ...` as a user runs them, and the CLI's refusals when
its control plane is a server it cannot use."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

from conftest import run_portal as portal

from portal.server.testing import ServerProcess
from portal.server.tokens import TokenFile, token_hash


def test_a_token_is_printed_once_and_only_its_hash_is_kept(tmp_path: Path) -> None:
    made = portal(tmp_path, "server", "token", "create", "alice")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert made.stdout == token + "\n" and token.startswith("ptk_") and len(token) > 40
    assert "shown only now" in made.stderr
    path = tmp_path / "server-tokens.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert token not in text and token_hash(token) in text
    assert TokenFile(path).user_of(token) == "alice"

    listed = portal(tmp_path, "server", "token", "list")
    assert listed.returncode == 0
    assert listed.stdout.splitlines()[0].split() == ["USER", "ROLE", "CREATED", "EXPIRES"]
    assert listed.stdout.splitlines()[1].startswith("alice  user  ")
    assert listed.stdout.splitlines()[1].endswith("  never")
    admin = portal(tmp_path, "server", "token", "create", "root", "--admin")
    assert admin.returncode == 0 and "an admin token for root" in admin.stderr
    assert TokenFile(path).principal_of(admin.stdout.strip()).admin  # type: ignore[union-attr]
    assert token not in listed.stdout


def test_a_new_token_replaces_the_old_and_revoke_removes_it(tmp_path: Path) -> None:
    tokens = tmp_path / "elsewhere" / "tokens.json"
    first = portal(tmp_path, "server", "token", "create", "bob", "--tokens", str(tokens))
    second = portal(tmp_path, "server", "--tokens", str(tokens), "token", "create", "bob")
    assert "previous token no longer works" in second.stderr
    found = TokenFile(tokens)
    assert found.user_of(first.stdout.strip()) is None
    assert found.user_of(second.stdout.strip()) == "bob"
    revoked = portal(tmp_path, "server", "token", "revoke", "bob", "--tokens", str(tokens))
    assert revoked.returncode == 0, revoked.stderr
    assert found.user_of(second.stdout.strip()) is None
    again = portal(tmp_path, "server", "token", "revoke", "bob", "--tokens", str(tokens))
    assert again.returncode == 64
    assert "no token for user 'bob'" in again.stderr and "portal server token list" in again.stderr


def test_bad_user_names_and_bad_token_files_are_refused(tmp_path: Path) -> None:
    bad = portal(tmp_path, "server", "token", "create", "al ice")
    assert bad.returncode == 64 and "user name 'al ice' is not valid" in bad.stderr
    (tmp_path / "server-tokens.json").write_text("{oops")
    broken = portal(tmp_path, "server", "token", "list")
    assert broken.returncode == 64
    assert "is not one Portal wrote" in broken.stderr and "token create USER" in broken.stderr


def test_the_server_refuses_to_start_without_tokens_or_a_port(tmp_path: Path) -> None:
    none = portal(tmp_path, "server", "--port", "0")
    assert none.returncode == 64
    assert "no tokens in" in none.stderr and "portal server token create USER" in none.stderr
    portal(tmp_path, "server", "token", "create", "alice")
    bad_port = portal(tmp_path, "server", "--port", "70000")
    assert bad_port.returncode == 64 and "--port 70000 is not a TCP port" in bad_port.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = str(taken.getsockname()[1])
        busy = portal(tmp_path, "server", "--port", port)
    assert busy.returncode == 64 and f"cannot listen on 127.0.0.1:{port}" in busy.stderr


def test_without_the_server_installed_portal_says_what_to_install(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['portal.server'] = None\n"
        "from portal.cli.main import main\n"
        "raise SystemExit(main(['server', 'token', 'list']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PORTAL_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 64
    assert "pip install portal-server" in done.stderr


def test_portal_help_lists_the_server(tmp_path: Path) -> None:
    assert "server" in portal(tmp_path, "--help").stdout
    assert "token" in portal(tmp_path, "server", "--help").stdout


def test_a_control_plane_setting_that_is_no_url_is_refused(tmp_path: Path) -> None:
    done = portal(tmp_path, "jobs", env={"PORTAL_CONTROL_PLANE": "ftp://host"})
    assert done.returncode == 64
    assert "setting control_plane has value 'ftp://host'" in done.stderr
    assert "PORTAL_CONTROL_PLANE" in done.stderr
    (tmp_path / "config.toml").write_text('control_plane = "127.0.0.1:8471"\n')
    from_file = portal(tmp_path, "jobs")
    assert from_file.returncode == 64
    assert str(tmp_path / "config.toml") in from_file.stderr and "http://" in from_file.stderr
    (tmp_path / "config.toml").write_text("control_plane = \n")
    broken = portal(tmp_path, "jobs")
    assert broken.returncode == 64 and "is not valid TOML" in broken.stderr


def test_the_cli_without_a_token_is_refused_with_the_way_in(
    server: ServerProcess, tmp_path: Path
) -> None:
    done = portal(tmp_path / "cli", "jobs", env={"PORTAL_CONTROL_PLANE": server.url})
    assert done.returncode == 69
    assert "has no token; set PORTAL_TOKEN" in done.stderr and "[UNAUTHORIZED]" in done.stderr
    ok = portal(tmp_path / "cli", "jobs", env=server.env())
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split() == [
        "JOB",
        "NAME",
        "SUBMITTED",
        "DURATION",
        "STATE",
        "MACHINE",
        "ATTEMPTS",
        "LAST",
        "CHECKPOINT",
        "CARRY",
        "SCRIPT",
    ]


def test_an_unreachable_control_plane_is_named(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = portal(tmp_path, "status", "x", env={"PORTAL_CONTROL_PLANE": f"http://127.0.0.1:{port}"})
    assert done.returncode == 69
    assert f"cannot reach the control plane at http://127.0.0.1:{port}" in done.stderr
    assert "[CONTROL_PLANE_UNAVAILABLE]" in done.stderr


def test_a_job_token_is_made_only_for_a_job_of_its_user(server: ServerProcess) -> None:
    """``token create bob --job J`` for alice's job succeeded (a token that could do nothing):
    refused at creation, naming the job, its owner and the way out; as is a job that does not
    exist yet, or a job's name where its id is needed."""
    from conftest import Raw

    raw = Raw(server.url)
    alice, _ = server.tokens.create("alice")
    job = {"id": "j-a", "name": "train", "script": "s.py", "workdir": "/w", "created_at": 1.0}
    assert raw("POST", "/v1/jobs", {**job, "state": "running"}, token=alice)[0] == 201
    home = server.home

    bob = portal(home, "server", "token", "create", "bob", "--job", "j-a")
    assert bob.returncode == 64, bob.stderr
    assert bob.stdout == ""
    assert "job j-a is alice's, not bob's" in bob.stderr
    assert "token create alice --job j-a" in bob.stderr and "[INVALID_ARGUMENT]" in bob.stderr
    assert not any(e.user == "bob" for e in server.tokens.entries())

    nope = portal(home, "server", "token", "create", "bob", "--job", "j-nope")
    assert nope.returncode == 64
    assert "no job 'j-nope'" in nope.stderr and "create the job first" in nope.stderr

    by_name = portal(home, "server", "token", "create", "alice", "--job", "train")
    assert by_name.returncode == 64
    assert "'train' is the name of job j-a" in by_name.stderr and "--job j-a" in by_name.stderr

    made = portal(home, "server", "token", "create", "alice", "--job", "j-a")
    assert made.returncode == 0, made.stderr
    assert "for job j-a only" in made.stderr
    node = made.stdout.strip()
    assert raw("GET", "/v1/jobs/j-a", token=node)[0] == 200


def test_a_job_token_with_no_store_yet_is_refused_and_makes_none(tmp_path: Path) -> None:
    """A server that never ran has no jobs: the token command says so, and leaves no database
    behind (it only looks)."""
    done = portal(tmp_path, "server", "token", "create", "bob", "--job", "j-a")
    assert done.returncode == 64
    assert "no job 'j-a'" in done.stderr
    assert not (tmp_path / "portal.db").exists()
    elsewhere = tmp_path / "other.db"
    other = portal(
        tmp_path, "server", "token", "create", "bob", "--job", "j-a", "--db", str(elsewhere)
    )
    assert other.returncode == 64 and str(elsewhere) in other.stderr
    assert not elsewhere.exists()
