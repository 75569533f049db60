"""The HTTP API of a real `portal server` process: tokens on every route but health, versioned
paths, structured errors, and refusals that come back to the client as the very same errors."""

from __future__ import annotations

import os
import socket
import sqlite3
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Raw

from portal.control import api
from portal.control.remote import HttpControlStore
from portal.control.store import ControlStore, SqliteControlStore
from portal.core.domain import AttemptState, Event, Job, JobState
from portal.core.errors import InvalidArgumentError, PortalError
from portal.server.testing import ServerProcess, running_server

JOB = {"id": "j-a", "script": "train.py", "workdir": "/w", "created_at": 1.0, "state": "running"}

#: Every route but health, with a body its method accepts.
ROUTES: list[tuple[str, str, Any]] = [
    ("GET", "/v1/version", None),
    ("GET", "/v1/jobs", None),
    ("POST", "/v1/jobs", JOB),
    ("GET", "/v1/jobs/j-a", None),
    ("POST", "/v1/jobs/j-a/state", {"state": "pausing", "expect": ["running"]}),
    ("GET", "/v1/jobs/j-a/heard", None),
    ("POST", "/v1/jobs/j-a/heard", {"at": 2.0}),
    ("GET", "/v1/jobs/j-a/attempts", None),
    ("POST", "/v1/jobs/j-a/attempts", {"machine": "m", "at": 2.0}),
    ("POST", "/v1/jobs/j-a/attempts/1/end", {"state": "exited", "at": 3.0, "exit_code": 0}),
    ("GET", "/v1/jobs/j-a/events?after=0", None),
    ("POST", "/v1/jobs/j-a/events", {"at": 1.0, "kind": "k", "message": "m"}),
    ("GET", "/v1/reclaims?since=0", None),
    ("POST", "/v1/reclaims", {"pool": "p", "at": 1.0, "machine": "m"}),
]


@pytest.fixture
def client(server: ServerProcess) -> Iterator[HttpControlStore]:
    store = HttpControlStore(server.url, token=server.token)
    yield store
    store.close()


# --- tokens -----------------------------------------------------------------------------------


def test_health_needs_no_token(raw: Raw) -> None:
    assert raw("GET", "/v1/health")[::2] == (200, {"ok": True})


def test_every_other_route_refuses_a_request_without_a_valid_token(tmp_path: Path) -> None:
    # More bad tokens than one address may send by default: the limit is tested on its own.
    with running_server(
        "sqlite", home=tmp_path / "server", args=["--auth-failures", "0"]
    ) as server:
        _every_route_refuses_bad_tokens(Raw(server.url), server)


def _every_route_refuses_bad_tokens(raw: Raw, server: ServerProcess) -> None:
    for method, path, body in ROUTES:
        for token in (None, "ptk_not-a-token", ""):
            status, headers, answer = raw(method, path, body, token=token)
            assert status == 401, (method, path, token, answer)
            assert headers["www-authenticate"] == "Bearer"
            assert answer["code"] == "UNAUTHORIZED"
            assert f"refused {method} {path.split('?')[0]}" in answer["message"]
            assert "set PORTAL_TOKEN" in answer["message"]
            assert "`portal server token create USER`" in answer["message"]
        basic = {"Authorization": f"Basic {server.token}"}
        assert raw(method, path, body, headers=basic)[0] == 401, (method, path)
    assert raw("GET", "/v1/jobs", token=server.token)[2] == {"jobs": []}  # nothing was written


def test_reads_and_writes_with_a_token_and_a_revoked_token_is_refused_at_once(
    raw: Raw, server: ServerProcess
) -> None:
    bob, _ = server.tokens.create("bob")
    assert raw("POST", "/v1/jobs", JOB, token=bob)[0] == 201
    status, _, job = raw("GET", "/v1/jobs/j-a", token=bob)
    assert (status, job["id"], job["state"]) == (200, "j-a", "running")
    revoked = subprocess.run(
        [sys.executable, "-m", "portal.cli", "server", "token", "revoke", "bob"],
        env={**os.environ, "PORTAL_HOME": str(server.home)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert revoked.returncode == 0, revoked.stderr
    status, _, answer = raw("GET", "/v1/jobs", token=bob)
    assert status == 401 and "unknown or revoked" in answer["message"]
    assert raw("GET", "/v1/jobs", token=server.token)[0] == 200  # another user's still works


def test_each_write_is_logged_with_its_user(raw: Raw, server: ServerProcess) -> None:
    alice, _ = server.tokens.create("alice")
    bob, _ = server.tokens.create("bob")
    raw("POST", "/v1/jobs", JOB, token=alice)
    raw("POST", "/v1/jobs/j-a/state", {"state": "done"}, token=alice)
    raw("POST", "/v1/jobs/j-a/state", {"state": "done"}, token=bob)
    raw("POST", "/v1/jobs/j-a/state", {"state": "done"}, token=server.token)
    raw("GET", "/v1/jobs", token=alice)
    log = server.log.read_text()
    assert "alice POST /v1/jobs -> 201" in log
    assert "alice POST /v1/jobs/j-a/state -> 200" in log
    assert "bob POST /v1/jobs/j-a/state -> 404" in log  # not bob's job
    assert "tester POST /v1/jobs/j-a/state -> 200" in log  # the test's token is an admin's
    assert "GET /v1/jobs" not in log  # reads are not logged


def test_bad_tokens_from_one_address_are_limited_and_valid_ones_still_served(
    tmp_path: Path,
) -> None:
    """Requests with bad tokens were never limited. Past --auth-failures N a minute from one
    address they are answered 429 with Retry-After, naming the limit; a valid token from the
    same address is still served (an address may be a NAT shared by a whole fleet)."""
    with running_server(
        "sqlite", home=tmp_path / "server", args=["--auth-failures", "3"]
    ) as server:
        raw = Raw(server.url)
        for token in (None, "ptk_wrong", ""):
            assert raw("GET", "/v1/jobs", token=token)[0] == 401
        status, headers, answer = raw("POST", "/v1/jobs", JOB, token="ptk_wrong")
        assert (status, answer["code"]) == (429, "RATE_LIMITED"), answer
        assert 1 <= int(headers["retry-after"]) <= 20  # one more failure each 20 s
        assert (
            "refused POST /v1/jobs: 127.0.0.1 sent more than 3 requests a minute"
            in (answer["message"])
        )
        assert "without a valid token" in answer["message"]
        assert "--auth-failures" in answer["message"] and "set PORTAL_TOKEN" in answer["message"]
        assert answer["details"]["limit_per_minute"] == 3
        assert raw("GET", "/v1/jobs", token="ptk_wrong")[0] == 429
        assert raw("GET", "/v1/jobs", token=server.token)[2] == {"jobs": []}  # nothing written
        assert raw("GET", "/v1/health")[0] == 200
    bad = subprocess.run(
        [sys.executable, "-m", "portal.cli", "server", "--auth-failures", "-1"],
        env={**os.environ, "PORTAL_HOME": str(tmp_path / "x")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 64 and "--auth-failures: expected a number" in bad.stderr


def test_bad_tokens_are_logged_as_a_count_per_address_not_a_line_each(tmp_path: Path) -> None:
    """Each bad token wrote a warning line: a loop with a revoked token filled the log. Now an
    address's first refusal is logged at once, the rest as one count a minute (and when the
    server stops)."""
    with running_server("sqlite", home=tmp_path / "server") as server:
        raw = Raw(server.url)
        for _ in range(12):
            assert raw("GET", "/v1/jobs", token="ptk_wrong")[0] == 401
        during = [line for line in server.log.read_text().splitlines() if "refused" in line]
    assert len(during) == 1, during
    assert "refused a request from 127.0.0.1 for its token" in during[0]
    assert "its token is unknown or revoked" in during[0] and "one line a minute" in during[0]
    after = [line for line in server.log.read_text().splitlines() if "refused" in line]
    assert len(after) == 2, after
    assert "refused 11 more requests from 127.0.0.1 for its token in the last minute" in after[1]
    assert "the last: the control plane refused GET /v1/jobs" in after[1]


# --- who may see and change a job ------------------------------------------------------------


def test_a_user_sees_and_changes_only_their_jobs_and_an_admin_every_one(
    raw: Raw, server: ServerProcess
) -> None:
    alice, _ = server.tokens.create("alice")
    bob, _ = server.tokens.create("bob")
    root, _ = server.tokens.create("root", role="admin")
    assert raw("POST", "/v1/jobs", JOB, token=alice)[0] == 201
    assert raw("POST", "/v1/jobs", {**JOB, "id": "j-b"}, token=bob)[0] == 201
    ids = lambda token: [j["id"] for j in raw("GET", "/v1/jobs", token=token)[2]["jobs"]]  # noqa: E731
    assert ids(alice) == ["j-a"] and ids(bob) == ["j-b"]
    assert sorted(ids(root)) == ["j-a", "j-b"]
    for method, path, body in ROUTES:  # every route under alice's job, with bob's token
        if "/jobs/j-a" not in path:
            continue
        status, _, answer = raw(method, path, body, token=bob)
        assert status == 404 and answer["code"] == "JOB_NOT_FOUND", (method, path, answer)
        assert "among bob's" in answer["message"]
    assert raw("GET", "/v1/jobs/j-a/events?after=0", token=alice)[2] == {"events": []}
    assert raw("POST", "/v1/jobs/j-a/state", {"state": "done"}, token=root)[0] == 200


def test_a_job_token_reads_and_writes_that_one_job_only(raw: Raw, server: ServerProcess) -> None:
    """What a node on another machine is given: ``token create alice --job j-a``."""
    alice, _ = server.tokens.create("alice")
    assert raw("POST", "/v1/jobs", JOB, token=alice)[0] == 201
    assert raw("POST", "/v1/jobs", {**JOB, "id": "j-b"}, token=alice)[0] == 201
    node, replaced = server.tokens.create("alice", job="j-a")
    assert not replaced and raw("GET", "/v1/jobs", token=alice)[0] == 200  # alice's own stays
    assert [j["id"] for j in raw("GET", "/v1/jobs", token=node)[2]["jobs"]] == ["j-a"]
    event = {"at": 2.0, "kind": "k", "message": "from the node"}
    assert raw("POST", "/v1/jobs/j-a/events", event, token=node)[0] == 201
    assert raw("POST", "/v1/jobs/j-a/attempts", {"machine": "m", "at": 2.0}, token=node)[0] == 201
    status, _, answer = raw("GET", "/v1/jobs/j-b", token=node)
    assert status == 404 and answer["code"] == "JOB_NOT_FOUND"
    status, _, answer = raw("POST", "/v1/jobs", {**JOB, "id": "j-c"}, token=node)
    assert status == 400 and "held to job j-a: it creates no job" in answer["message"]
    with pytest.raises(InvalidArgumentError, match="cannot be an admin's"):
        server.tokens.create("root", role="admin", job="j-a")


def test_only_an_admin_or_a_job_of_its_machine_records_a_reclaim(
    raw: Raw, server: ServerProcess
) -> None:
    """Reclaims steer every user's placements (a reclaimed pool is left out a while): a plain
    user's token may not write one; an admin's may; a job's token only for a machine its job
    ran on. Everyone still reads them."""
    alice, _ = server.tokens.create("alice")
    root, _ = server.tokens.create("root", role="admin")
    assert raw("POST", "/v1/jobs", JOB, token=alice)[0] == 201
    assert (
        raw("POST", "/v1/jobs/j-a/attempts", {"machine": "m-1", "at": 2.0}, token=alice)[0] == 201
    )
    node, _ = server.tokens.create("alice", job="j-a")
    reclaim = {"pool": "spot:aws:c7i.large:us-east-1a", "at": 3.0, "machine": "m-1"}

    status, _, answer = raw("POST", "/v1/reclaims", reclaim, token=alice)
    assert (status, answer["code"]) == (403, "FORBIDDEN"), answer
    assert "the token of alice may not record a reclaim" in answer["message"]
    assert "every user's placements" in answer["message"]
    assert "--admin" in answer["message"] and "--job JOB" in answer["message"]
    assert raw("GET", "/v1/reclaims?since=0", token=alice)[2] == {"reclaims": []}

    status, _, answer = raw("POST", "/v1/reclaims", {**reclaim, "machine": "m-2"}, token=node)
    assert (status, answer["code"]) == (403, "FORBIDDEN"), answer
    assert "job j-a, which ran on no machine 'm-2'" in answer["message"]
    assert "m-1" in answer["message"]

    assert raw("POST", "/v1/reclaims", reclaim, token=node)[0] == 204
    assert raw("POST", "/v1/reclaims", {**reclaim, "at": 4.0, "machine": "x"}, token=root)[0] == 204
    pools = raw("GET", "/v1/reclaims?since=0", token=alice)[2]["reclaims"]
    assert pools == [{"pool": reclaim["pool"], "at": 3.0}, {"pool": reclaim["pool"], "at": 4.0}]
    assert "alice POST /v1/reclaims -> 403" in server.log.read_text()


# --- job names: each user's own --------------------------------------------------------------


def test_job_names_are_each_users_own(raw: Raw, server: ServerProcess) -> None:
    """Names were one namespace across users: bob learnt alice's names ("a job named 'alicejob'
    already exists") and could take the ones her scripts use. Now a name is unique among one
    user's jobs, and a name means the caller's own job by that name."""
    alice, _ = server.tokens.create("alice")
    bob, _ = server.tokens.create("bob")
    root, _ = server.tokens.create("root", role="admin")
    named = {**JOB, "name": "alicejob"}
    assert raw("POST", "/v1/jobs", named, token=alice)[0] == 201
    status, _, job = raw("POST", "/v1/jobs", {**named, "id": "j-b"}, token=bob)
    assert (status, job["id"], job["name"]) == (201, "j-b", "alicejob"), job

    # bob's refusal concerns bob's own job, in the embedded store's words
    status, _, answer = raw("POST", "/v1/jobs", {**named, "id": "j-c"}, token=bob)
    assert (status, answer["details"]) == (400, {"name": "alicejob"}), answer
    assert answer["message"].startswith("a job named 'alicejob' already exists")
    assert raw("POST", "/v1/jobs", {**JOB, "id": "j-s", "name": "secret"}, token=alice)[0] == 201
    assert raw("POST", "/v1/jobs", {**JOB, "id": "j-t", "name": "secret"}, token=bob)[0] == 201

    # a name finds the caller's own job, on every route
    assert raw("GET", "/v1/jobs/alicejob", token=alice)[2]["id"] == "j-a"
    assert raw("GET", "/v1/jobs/alicejob", token=bob)[2]["id"] == "j-b"
    status, _, job = raw("POST", "/v1/jobs/alicejob/state", {"state": "done"}, token=bob)
    assert (status, job["id"], job["name"], job["state"]) == (200, "j-b", "alicejob", "done")
    assert raw("GET", "/v1/jobs/alicejob", token=alice)[2]["state"] == "running"
    event = {"at": 1.0, "kind": "k", "message": "bob's"}
    assert raw("POST", "/v1/jobs/alicejob/events", event, token=bob)[0] == 201
    assert raw("GET", "/v1/jobs/j-a/events", token=alice)[2] == {"events": []}
    listed = raw("GET", "/v1/jobs", token=bob)[2]["jobs"]
    assert [(j["id"], j["name"]) for j in listed] == [("j-b", "alicejob"), ("j-t", "secret")]
    status, _, answer = raw("GET", "/v1/jobs/onlyhers", token=bob)
    assert status == 404  # as any name bob has no job of
    assert raw("POST", "/v1/jobs", {**JOB, "id": "j-o", "name": "onlyhers"}, token=alice)[0] == 201
    status, _, answer = raw("GET", "/v1/jobs/onlyhers", token=bob)
    assert (status, answer["code"]) == (404, "JOB_NOT_FOUND") and "among bob's" in answer["message"]

    # an admin: a name only one user has is found; one several users have is ambiguous
    assert raw("GET", "/v1/jobs/onlyhers", token=root)[2]["id"] == "j-o"
    status, _, answer = raw("GET", "/v1/jobs/alicejob", token=root)
    assert (status, answer["code"]) == (400, "INVALID_ARGUMENT"), answer
    assert "2 jobs are named 'alicejob'" in answer["message"]
    assert (
        "j-a (alice), j-b (bob)" in answer["message"] and "give the job's id" in answer["message"]
    )
    assert answer["details"] == {"job": "alicejob", "jobs": ["j-a", "j-b"]}
    assert raw("GET", "/v1/jobs/j-b", token=root)[2]["name"] == "alicejob"
    assert raw("POST", "/v1/jobs", {**named, "id": "j-r"}, token=root)[0] == 201
    assert raw("GET", "/v1/jobs/alicejob", token=root)[2]["id"] == "j-r"  # its own wins


def test_a_name_shaped_like_a_job_id_is_refused(raw: Raw, server: ServerProcess) -> None:
    """Ids and names share the JOB argument of every command, and an id wins over a name that
    spells it: a name shaped like the ids Portal makes could mean another job."""
    status, _, answer = raw("POST", "/v1/jobs", {**JOB, "name": "j-0c1f2a3b4d"}, token=server.token)
    assert (status, answer["code"]) == (400, "INVALID_ARGUMENT"), answer
    assert "job name 'j-0c1f2a3b4d' is shaped like a job id" in answer["message"]
    assert "share the JOB argument of every command" in answer["message"]
    assert "choose another --name" in answer["message"]
    assert answer["details"] == {"name": "j-0c1f2a3b4d"}
    assert raw("GET", "/v1/jobs", token=server.token)[2] == {"jobs": []}
    assert raw("POST", "/v1/jobs", {**JOB, "name": "j-train"}, token=server.token)[0] == 201


def test_names_the_store_kept_from_before_stay_their_owners(tmp_path: Path) -> None:
    """Jobs named before names were the server's keep their name in the store, and an owners'
    record from then (no name column) is brought up to date: the name is still its owner's."""
    home = tmp_path / "server"
    home.mkdir()
    store = SqliteControlStore(home / "portal.db")
    store.create_job(Job(id="j-old", name="legacy", script="s.py", workdir="/w", created_at=1.0))
    store.close()
    old = sqlite3.connect(home / "server-owners.db", isolation_level=None)
    old.execute("CREATE TABLE owners (job TEXT PRIMARY KEY, user TEXT NOT NULL, at REAL)")
    old.execute("INSERT INTO owners VALUES ('j-old', 'alice', 1.0)")
    old.close()
    with running_server("sqlite", home=home) as server:
        raw = Raw(server.url)
        alice, _ = server.tokens.create("alice")
        bob, _ = server.tokens.create("bob")
        job = raw("GET", "/v1/jobs/legacy", token=alice)[2]
        assert (job["id"], job["name"]) == ("j-old", "legacy")
        assert raw("GET", "/v1/jobs/legacy", token=bob)[0] == 404
        status, _, answer = raw("POST", "/v1/jobs", {**JOB, "name": "legacy"}, token=alice)
        assert status == 400 and "'legacy' already exists" in answer["message"]
        assert raw("POST", "/v1/jobs", {**JOB, "name": "legacy"}, token=bob)[0] == 201
        assert raw("GET", "/v1/jobs/legacy", token=bob)[2]["id"] == "j-a"
        assert [j["name"] for j in raw("GET", "/v1/jobs", token=alice)[2]["jobs"]] == ["legacy"]


def test_the_owners_record_is_the_servers_own(raw: Raw, server: ServerProcess) -> None:
    """Kept beside the tokens, not in the store: a job's events (and their numbers) are the
    embedded store's, and no client writes or reads who owns what."""
    alice, _ = server.tokens.create("alice")
    assert raw("POST", "/v1/jobs", JOB, token=alice)[0] == 201
    event = {"at": 1.0, "kind": "k", "message": "m"}
    assert raw("POST", "/v1/jobs/j-a/events", event, token=alice)[2] == {"seq": 1}
    assert stat.S_IMODE((server.home / "server-owners.db").stat().st_mode) == 0o600


def test_an_expired_token_is_refused_saying_so(raw: Raw, server: ServerProcess) -> None:
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "portal.cli",
            "server",
            "token",
            "create",
            "temp",
            "--expires",
            "1s",
        ],
        env={**os.environ, "PORTAL_HOME": str(server.home)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    assert "expires in 1s" in made.stderr
    token = made.stdout.strip()
    listed = subprocess.run(
        [sys.executable, "-m", "portal.cli", "server", "token", "list"],
        env={**os.environ, "PORTAL_HOME": str(server.home)},
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert listed.splitlines()[0].split() == ["USER", "ROLE", "CREATED", "EXPIRES"]
    temp = next(line for line in listed.splitlines() if line.startswith("temp"))
    assert temp.split()[1] == "user" and "never" not in temp
    import time

    time.sleep(1.1)
    status, _, answer = raw("GET", "/v1/jobs", token=token)
    assert status == 401 and "the token of temp expired at" in answer["message"]
    bad = subprocess.run(
        [sys.executable, "-m", "portal.cli", "server", "token", "create", "x", "--expires", "soon"],
        env={**os.environ, "PORTAL_HOME": str(server.home)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 64 and "--expires 'soon'" in bad.stderr


# --- versions and paths -----------------------------------------------------------------------


def test_the_version_says_api_1_and_the_store(client: HttpControlStore) -> None:
    found = client.version()
    assert (found.api, found.revision, found.store) == (1, api.API_REVISION, "sqlite")


def test_paths_outside_v1_are_refused_with_the_version_served(
    raw: Raw, server: ServerProcess
) -> None:
    for path in ("/v2/jobs", "/jobs", "/v1/nothing", "/"):
        status, _, answer = raw("GET", path, token=server.token)
        assert status == 404, path
        assert answer["code"] == "NOT_FOUND"
        assert f"no API path {path}: this server speaks /v1" in answer["message"]


def test_a_method_a_path_does_not_take_is_refused(raw: Raw, server: ServerProcess) -> None:
    status, _, answer = raw("DELETE", "/v1/reclaims", token=server.token)
    assert (status, answer["code"]) == (405, "METHOD_NOT_ALLOWED")


BAD_INPUT: list[tuple[str, str, Any, str]] = [
    ("POST", "/v1/jobs", b"{not json", "not a valid JobWire"),
    ("POST", "/v1/jobs", {"id": "j-a"}, "not a valid JobWire"),
    ("POST", "/v1/jobs", {**JOB, "name": "no spaces"}, "job name 'no spaces' is not valid"),
    ("POST", "/v1/jobs/j-a/state", {"state": "asleep"}, "unknown job state 'asleep'"),
    (
        "POST",
        "/v1/jobs/j-a/attempts/1/end",
        {"state": "gone", "at": 1.0},
        "unknown attempt state 'gone'",
    ),
    ("GET", "/v1/jobs/j-a/events?after=x", None, "after='x'"),
    ("GET", "/v1/reclaims?since=soon", None, "since='soon'"),
    # Numbers the stores cannot keep: refused as input, never a 500 from the database.
    ("GET", f"/v1/jobs/j-a/events?after={2**64}", None, "a 64-bit integer"),
    ("GET", "/v1/reclaims?since=1e999", None, "a finite time"),
    ("POST", f"/v1/jobs/j-a/attempts/{2**40}/end", {"state": "exited", "at": 1.0}, "no attempt"),
    (
        "POST",
        "/v1/jobs/j-a/attempts/1/end",
        {"state": "exited", "at": 1.0, "exit_code": 2**70},
        "not a valid EndAttemptRequest",
    ),
    (
        "POST",
        "/v1/jobs/j-a/events",
        {"at": -5.0, "kind": "k", "message": "m"},
        "not a valid NewEvent",
    ),
    ("POST", "/v1/jobs/j-a/heard", {"at": 1e300}, "not a valid HeardRequest"),
]


def test_bad_input_is_refused_with_what_is_wrong(raw: Raw, server: ServerProcess) -> None:
    raw("POST", "/v1/jobs", JOB, token=server.token)
    raw("POST", "/v1/jobs/j-a/attempts", {"machine": "m", "at": 2.0}, token=server.token)
    for method, path, body, needle in BAD_INPUT:
        status, _, answer = raw(method, path, body, token=server.token)
        assert status == 400, (path, answer)
        assert answer["code"] == "INVALID_ARGUMENT" and answer["invalid_argument"] is True
        assert needle in answer["message"], answer


def test_event_kinds_of_the_server_are_refused_and_never_read_back(
    raw: Raw, server: ServerProcess
) -> None:
    """``server.*`` kinds are the server's own (``server.owner`` once recorded who made a job):
    a client that writes one is refused, naming the kind, and none is read back."""
    raw("POST", "/v1/jobs", JOB, token=server.token)
    for kind in ("server.owner", "server.anything", "SERVER.Owner"):
        event = {"at": 1.0, "kind": kind, "message": "alice owns it"}
        status, _, answer = raw("POST", "/v1/jobs/j-a/events", event, token=server.token)
        assert (status, answer["code"]) == (400, "INVALID_ARGUMENT"), (kind, answer)
        assert f"event kind {kind!r} is reserved" in answer["message"]
        assert "the 'server.' prefix is the server's own" in answer["message"]
        assert answer["details"] == {"kind": kind}
    for kind in ("servers", "server-side.note", "my.server.owner"):
        event = {"at": 1.0, "kind": kind, "message": "m"}
        assert raw("POST", "/v1/jobs/j-a/events", event, token=server.token)[0] == 201, kind
    kinds = [
        e["event"]["kind"]
        for e in raw("GET", "/v1/jobs/j-a/events?after=0", token=server.token)[2]["events"]
    ]
    assert kinds == ["servers", "server-side.note", "my.server.owner"]


def _nested(depth: int) -> bytes:
    """An event whose data holds lists ``depth`` levels deep (the data object is level 1)."""
    inner = b"[" * (depth - 1) + b"]" * (depth - 1)
    return b'{"at": 1.0, "kind": "k", "message": "m", "data": {"x": ' + inner + b"}}"


def test_deeply_nested_json_is_refused_naming_the_limit(raw: Raw, server: ServerProcess) -> None:
    """50,000 levels of ``[`` in an event's data answered 500 (RecursionError): refused as
    input now, the limit named, whatever the body (a job's unknown field too)."""
    raw("POST", "/v1/jobs", JOB, token=server.token)
    for depth in (50_000, 2_000, 65):
        status, _, answer = raw("POST", "/v1/jobs/j-a/events", _nested(depth), token=server.token)
        assert (status, answer["code"]) == (400, "INVALID_ARGUMENT"), (depth, answer)
        assert "nested more than 64 levels deep" in answer["message"], answer
        assert answer["details"]["limit"] == 64
    deep_job = b'{"extra": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    status, _, answer = raw("POST", "/v1/jobs", deep_job, token=server.token)
    assert status == 400 and "nested more than 64 levels deep" in answer["message"], answer
    assert raw("POST", "/v1/jobs/j-a/events", _nested(64), token=server.token)[0] == 201
    found = raw("GET", "/v1/jobs/j-a/events?after=0", token=server.token)[2]["events"]
    assert len(found) == 1
    assert "CONTROL_PLANE_INTERNAL" not in server.log.read_text()
    assert "Traceback" not in server.log.read_text()


def test_an_events_text_fields_are_capped_naming_the_field(raw: Raw, server: ServerProcess) -> None:
    """A 900 kB event kind was accepted: each text field of NewEvent has a cap, and a kind is a
    short name; the refusal names the field."""
    raw("POST", "/v1/jobs", JOB, token=server.token)
    event = {"at": 1.0, "kind": "k", "message": "m"}
    refused = [
        ({"kind": "k" * 900_000}, "length <= 128", "$.kind"),
        ({"kind": "k" * 129}, "length <= 128", "$.kind"),
        ({"kind": ""}, "length >= 1", "$.kind"),
        ({"kind": "two words"}, "matching regex", "$.kind"),
        ({"kind": "k\n"}, "matching regex", "$.kind"),
        ({"kind": "../x"}, "matching regex", "$.kind"),
        ({"message": "x" * 16_385}, "length <= 16384", "$.message"),
        ({"id": "r" * 129}, "length <= 128", "$.id"),
    ]
    for change, needle, field in refused:
        status, _, answer = raw(
            "POST", "/v1/jobs/j-a/events", {**event, **change}, token=server.token
        )
        assert (status, answer["code"]) == (400, "INVALID_ARGUMENT"), (change, answer)
        assert "not a valid NewEvent" in answer["message"]
        assert needle in answer["message"] and field in answer["message"], answer
    fine = {"kind": "ray.drain-refused_2:x", "message": "x" * 16_384, "id": "r" * 128}
    assert raw("POST", "/v1/jobs/j-a/events", {**event, **fine}, token=server.token)[0] == 201
    found = raw("GET", "/v1/jobs/j-a/events?after=0", token=server.token)[2]["events"]
    assert [e["event"]["kind"] for e in found] == ["ray.drain-refused_2:x"]


def test_a_body_over_the_limit_is_refused_before_it_is_stored(
    raw: Raw, server: ServerProcess, client: HttpControlStore
) -> None:
    """A 100 MB event was stored whole and returned by every read: the service refuses a body
    over 1 MiB (413), with the limit and the way out, and stores nothing of it."""
    raw("POST", "/v1/jobs", JOB, token=server.token)
    huge = {"at": 1.0, "kind": "k", "message": "x" * (2 << 20)}
    status, _, answer = raw("POST", "/v1/jobs/j-a/events", huge, token=server.token)
    assert status == 413 and answer["code"] == "REQUEST_TOO_LARGE", answer
    assert "over the control plane's limit of 1048576 bytes" in answer["message"]
    assert client.events("j-a") == []
    assert (
        raw(
            "POST",
            "/v1/jobs/j-a/events",
            {"at": 1.0, "kind": "k", "message": "m"},
            token=server.token,
        )[0]
        == 201
    )


def test_job_references_that_cannot_name_a_job_are_refused(
    client: HttpControlStore, raw: Raw, server: ServerProcess
) -> None:
    """A job id or name is one path segment of the store's rule: whatever a client sends in
    the path or the body, ``../x``, absolute paths, NUL bytes or a trailing newline never reach
    the store (a client would later build file paths from them)."""
    client.create_job(Job(id="j-a", name="a.b-c_d", script="s.py", workdir="/w", created_at=1))
    assert client.get_job("a.b-c_d").id == "j-a"
    odd_refs = ("x/y", "../v1/jobs", "../../../../x", "/abs", "a b?c#d", "é", "a\x00b", "j-a\n")
    for odd in odd_refs:
        with pytest.raises(PortalError, match="is not a job id or name") as err:
            client.get_job(odd)
        assert err.value.details["parameter"] == "ref"
        with pytest.raises(PortalError, match=r"is not a job id or name|no API path"):
            client.append_event(Event(job_id=odd, at=1.0, kind="k", message="m"))
    for bad_id in ("../../../../x", "/abs", "a\x00b", "j-b\n", "..", ""):
        status, _, answer = raw("POST", "/v1/jobs", {**JOB, "id": bad_id}, token=server.token)
        assert status == 400 and "job id" in answer["message"], (bad_id, answer)
    assert [j.id for j in client.list_jobs()] == ["j-a"]


# --- errors come back as the embedded store raises them -----------------------------------------


def _refusals(store: ControlStore) -> list[PortalError]:
    store.create_job(Job(id="j-a", name="train", script="s.py", workdir="/w", created_at=1.0))
    calls = [
        lambda: store.get_job("nope"),
        lambda: store.create_job(
            Job(id="j-b", name="train", script="s.py", workdir="/w", created_at=1.0)
        ),
        lambda: store.set_job_state("j-a", JobState.DONE, expect=[JobState.SUSPENDED]),
        lambda: store.set_job_state("j-zz", JobState.DONE),
        lambda: store.start_attempt("j-zz", machine="m", at=1.0),
        lambda: store.end_attempt("j-a", 4, state=AttemptState.EXITED, at=1.0, exit_code=0),
    ]
    seen = []
    for call in calls:
        with pytest.raises(PortalError) as err:
            call()
        seen.append(err.value)
    return seen


def test_refusals_come_back_as_the_same_errors_with_the_same_words(
    client: HttpControlStore, tmp_path: Path
) -> None:
    local = SqliteControlStore(tmp_path / "local.db")
    try:
        expected = _refusals(local)
    finally:
        local.close()
    got = _refusals(client)
    assert [type(e) for e in got] == [type(e) for e in expected]
    assert [(e.code, str(e), e.details) for e in got] == [
        (e.code, str(e), e.details) for e in expected
    ]
    assert isinstance(got[1], InvalidArgumentError)  # the CLI exits 64 for it, as locally


def test_a_code_this_client_does_not_know_keeps_its_code_and_kind() -> None:
    usage = api.error_from_body(
        api.ErrorBody(code="QUOTA_EXCEEDED", message="too many jobs", invalid_argument=True)
    )
    assert (usage.code, str(usage), isinstance(usage, InvalidArgumentError)) == (
        "QUOTA_EXCEEDED",
        "too many jobs",
        True,
    )
    other = api.error_from_body(api.ErrorBody(code="DISK_FULL", message="full", details={"a": 1}))
    assert (other.code, other.details, isinstance(other, InvalidArgumentError)) == (
        "DISK_FULL",
        {"a": 1},
        False,
    )


# --- the client's own failures ------------------------------------------------------------------


def test_an_unreachable_server_is_named_with_the_way_out() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    store = HttpControlStore(f"http://127.0.0.1:{port}", token="t", timeout=5)
    with pytest.raises(api.ControlPlaneUnavailableError) as err:
        store.list_jobs()
    message = str(err.value)
    assert f"cannot reach the control plane at http://127.0.0.1:{port}" in message
    assert "`portal server`" in message and "PORTAL_CONTROL_PLANE" in message
    assert err.value.code == "CONTROL_PLANE_UNAVAILABLE"


def test_a_server_that_never_answers_gives_up_after_the_timeout() -> None:
    """The node allows 2 s for a report: a hung server must not hold it longer."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)  # accepts connections (the kernel does), never answers
        port = listener.getsockname()[1]
        store = HttpControlStore(f"http://127.0.0.1:{port}", token="t", timeout=0.3)
        with pytest.raises(api.ControlPlaneUnavailableError, match=r"no answer within 0\.3 s"):
            store.heard("j-a", 1.0)
        store.close()


def test_something_else_on_the_port_is_not_taken_for_a_control_plane() -> None:
    """An HTTP server that is not Portal's: its answer is not read as a Portal refusal."""
    import http.server

    class NotPortal(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(404)
            self.end_headers()
            self.wfile.write(b"<html>nope</html>")

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), NotPortal)
    thread = threading.Thread(target=httpd.serve_forever)
    thread.start()
    try:
        store = HttpControlStore(f"http://127.0.0.1:{httpd.server_port}", token="t")
        with pytest.raises(api.ControlPlaneUnavailableError, match="HTTP 404 and no Portal error"):
            store.list_jobs()
        store.close()
    finally:
        httpd.shutdown()
        thread.join(30)
        httpd.server_close()


def test_a_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="not an http:// or https:// URL"):
        HttpControlStore("ftp://127.0.0.1:21", token=None)


def test_one_connection_per_thread_kept_alive(server: ServerProcess) -> None:
    store = HttpControlStore(server.url, token=server.token)
    store.list_jobs()
    first = store._local.conn
    store.list_jobs()
    assert store._local.conn is first  # kept alive, not reopened
    other: list[Any] = []
    thread = threading.Thread(target=lambda: (store.list_jobs(), other.append(store._local.conn)))
    thread.start()
    thread.join(30)
    assert other[0] is not first
    store.close()
    assert store._all == []


def test_a_restarted_server_is_reached_again_on_a_kept_connection(tmp_path: Path) -> None:
    """The server closed the idle connection (it restarted): the client reconnects once."""
    from portal.server.testing import running_server

    home = tmp_path / "server"
    with running_server("sqlite", home=home) as first:
        store = HttpControlStore(first.url, token=first.token)
        store.create_job(Job(id="j-a", script="s.py", workdir="/w", created_at=1.0))
        port = int(first.url.rsplit(":", 1)[1])
    # Another user: `running_server` gives its user a fresh token, replacing the old one.
    with running_server("sqlite", home=home, port=port, user="again") as again:
        assert again.url == first.url
        assert [j.id for j in store.list_jobs()] == ["j-a"]
    store.close()


# --- a user's rate ------------------------------------------------------------------------------


def test_each_user_is_held_to_the_rate_and_the_client_waits_its_turn(tmp_path: Path) -> None:
    """--rate-limit 2 (bursts of 20): past the burst a user is answered 429 RATE_LIMITED with
    Retry-After; another user is not slowed; Portal's client waits and asks again."""
    with running_server("sqlite", home=tmp_path / "server", args=["--rate-limit", "2"]) as server:
        raw = Raw(server.url)
        statuses = [raw("GET", "/v1/jobs", token=server.token) for _ in range(25)]
        refused = [s for s in statuses if s[0] == 429]
        assert 20 <= 25 - len(refused) <= 22, [s[0] for s in statuses]
        _, headers, answer = refused[0]
        assert answer["code"] == "RATE_LIMITED" and int(headers["retry-after"]) >= 1
        assert "more than 2 requests a second" in answer["message"]
        other, _ = server.tokens.create("other")
        assert raw("GET", "/v1/jobs", token=other)[0] == 200  # a bucket per user
        client = HttpControlStore(server.url, token=server.token)
        try:
            assert client.list_jobs() == []  # waited for its turn rather than failing
        finally:
            client.close()
    bad = subprocess.run(
        [sys.executable, "-m", "portal.cli", "server", "--rate-limit", "-1"],
        env={**os.environ, "PORTAL_HOME": str(tmp_path / "x")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 64 and "expected requests a second" in bad.stderr
