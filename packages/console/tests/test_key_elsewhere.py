"""A job whose key is on another machine: its checkpoints cannot be read here, but its timeline
and output need no key, so the console shows them; only what needs the key (the checkpoints'
listing) says, in one line, where the key is and how to get it.

Before the console read around the missing key, ``/api/jobs/JOB`` answered 500 with
``JOB_KEY_MISSING`` (``JobViews.status`` lists the checkpoints, which needs the key) and the run
page showed that error alone.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import PortalCli, console_on, screenshot, wait_state


def get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:
            return reply.status, dict(json.loads(reply.read()))
    except urllib.error.HTTPError as refused:
        return refused.code, dict(json.loads(refused.read()))


@pytest.fixture(scope="module")
def suspended(portal: PortalCli) -> str:
    """A job suspended at a notice: one checkpoint, sealed with its key."""
    started = portal("run", "--detach", "--name", "elsewhere", "steps.py")
    assert started.returncode == 0, started.stderr
    job = started.stdout.strip()
    portal.wait_carry(job, "ok")
    assert portal("notice", job, "--seconds", "30").returncode == 0
    wait_state(portal, job, "suspended")
    return job


@pytest.fixture
def key_moved(portal: PortalCli, suspended: str, tmp_path: Path) -> Iterator[str]:
    """The job's key taken to another machine (here: out of this PORTAL_HOME), brought back
    after the test."""
    key = portal.home / "keys" / f"{suspended}.key"
    away = tmp_path / key.name
    shutil.move(key, away)
    yield suspended
    shutil.move(away, key)


def test_a_job_whose_key_is_elsewhere_shows_its_timeline_and_logs(
    portal: PortalCli, console_url: str, key_moved: str
) -> None:
    job = key_moved
    code, body = get(f"{console_url}/api/jobs/{job}")
    assert code == 200, body
    kinds = [event["kind"] for event in body["events"]]
    assert {"started", "notice", "suspended"} <= set(kinds)
    rows = dict(body["overview"])
    assert rows["State"] == "suspended"
    # The one part that needs the key says where it is and the way to it, in one line.
    line = body["key_elsewhere"]
    assert "\n" not in line
    assert f"no key for job {job} in {portal.home / 'keys'}" in line
    assert "Run Portal with the PORTAL_HOME that created the job" in line
    assert rows["Last checkpoint"].endswith(", as recorded (not verified: the key is elsewhere)")
    code, logs = get(f"{console_url}/api/jobs/{job}/logs?attempt=1&stream=stdout")
    assert code == 200 and "step 1 total 1" in logs["text"]
    code, charts = get(f"{console_url}/api/jobs/{job}/charts")
    assert code == 200 and len(charts["charts"]) == 4


@pytest.fixture
def control_plane(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """`portal server` on a control store of its own: its URL and a user's token."""
    server = PortalCli(tmp_path / "server-home", tmp_path)
    token = server("server", "token", "create", "alice")
    assert token.returncode == 0, token.stderr
    process = subprocess.Popen(
        server.command("server", "--db", str(tmp_path / "control.db"), "--port", "0"),
        env=server.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    line = process.stderr.readline()
    found = re.search(r"control plane on (http://127\.0\.0\.1:\d+)", line)
    try:
        assert found, line
        yield found.group(1), token.stdout.strip()
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=15)
        process.stderr.close()


def test_on_a_shared_control_plane_the_other_machine_s_job_reads_without_its_key(
    portal: PortalCli, control_plane: tuple[str, str], tmp_path: Path
) -> None:
    """Two machines (two PORTAL_HOMEs) over one `portal server` and one checkpoint store: the
    console of the one that did not create the job has no key for it."""
    url, token = control_plane
    shared = {
        "PORTAL_CONTROL_PLANE": url,
        "PORTAL_TOKEN": token,
        "PORTAL_STORAGE_URL": (tmp_path / "store").as_uri(),
    }
    here, there = (PortalCli(tmp_path / name, portal.workdir) for name in ("here", "there"))
    for machine in (here, there):
        machine.env.update(shared)
    started = here("run", "--detach", "steps.py")
    assert started.returncode == 0, started.stderr
    job = started.stdout.strip()
    here.wait_carry(job, "ok")
    assert here("notice", job, "--seconds", "30").returncode == 0
    wait_state(here, job, "suspended")
    with console_on(there) as console:
        code, body = get(f"{console}/api/jobs/{job}")
        assert code == 200, body
        assert body["status"]["job"] == job
        assert any(event["kind"] == "suspended" for event in body["events"])
        assert f"no key for job {job} in {there.home / 'keys'}" in body["key_elsewhere"]
        code, logs = get(f"{console}/api/jobs/{job}/logs?attempt=1&stream=stdout")
        assert code == 200 and logs["text"] == ""  # its output stayed on the machine it ran on
        code, charts = get(f"{console}/api/jobs/{job}/charts")
        assert code == 200 and charts["charts"][0]["svg"].count("data-checkpoint=") == 1
    here.kill_nodes()


def test_the_run_page_shows_the_rest_and_one_line_for_the_key(
    portal: PortalCli, console_url: str, key_moved: str, page: Any
) -> None:
    from playwright.sync_api import expect

    job = key_moved
    page.goto(f"{console_url}/jobs/{job}")
    expect(page.locator("#overview dd[data-row='State']")).to_have_text("suspended")
    expect(page.locator('#timeline li[data-kind="suspended"]')).to_have_count(1)
    expect(page.locator('#attempt-1 pre[data-stream="stdout"]')).to_contain_text("step 1 total 1")
    note = page.locator("#key-elsewhere")
    expect(note).to_be_visible()
    expect(note).to_contain_text(f"no key for job {job}")
    expect(page.locator("#error")).to_be_hidden()
    screenshot(page, "run-page-key-elsewhere")
