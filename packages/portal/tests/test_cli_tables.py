"""The CLI's tables for people and for scripts: jobs and explain (with --json), plugins, --version, and
flags that contradict each other refused."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import PortalCli

from portal.core import units

#: The header of `portal jobs`, word by word (LAST CHECKPOINT is one column of two words).
_HEADER_LINE = "JOB NAME SUBMITTED DURATION STATE MACHINE ATTEMPTS LAST CHECKPOINT CARRY SCRIPT"
JOBS_HEADER = _HEADER_LINE.split()


def _documented_keys(heading: str) -> set[str]:
    """The keys docs/cli-json.md's table under ``heading`` lists (its first column)."""
    doc = (Path(__file__).resolve().parents[3] / "docs" / "cli-json.md").read_text()
    section = doc.split(heading, 1)[1].split("\n## ", 1)[0]
    first_cells = re.findall(r"^\| ([^|]+) \|", section, flags=re.MULTILINE)
    return {key for cell in first_cells for key in re.findall(r"`([a-z_]+)`", cell)}


def test_no_jobs_yet_says_where_it_looked_and_how_to_start_one(portal: PortalCli) -> None:
    done = portal("jobs")
    assert done.returncode == 0
    assert done.stdout.split() == JOBS_HEADER
    assert done.stderr == (
        f"portal: no jobs yet under PORTAL_HOME {portal.home}: start one with `portal run SCRIPT`\n"
    )
    listed = portal("jobs", "--json")  # for scripts: the empty list, and no words
    assert (listed.stdout.strip(), listed.stderr) == ("[]", "")


@pytest.mark.one_python
def test_jobs_for_people_and_for_scripts(portal: PortalCli) -> None:
    job = portal("run", "--detach", "--name", "twice", "count.py", "3").stdout.strip()
    portal.wait_for_output(job, "step 2 ")
    portal("notice", job)
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "suspended"
    assert portal("resume", job).returncode == 0
    (row,) = json.loads(portal("jobs", "--json").stdout)
    assert row["job"] == job and row["name"] == "twice" and row["state"] == "done"
    assert (row["attempts"], row["recoveries"], row["machine"]) == (2, 1, "local")
    assert row["script"] == "count.py" and row["created_at"] > 0
    assert row["started_at"] >= row["created_at"] and row["ended_at"] >= row["started_at"]
    assert row["duration_s"] == row["ended_at"] - row["started_at"]
    last = row["last_checkpoint"]
    assert last["id"] and last["bytes"] > 0 and last["created_at"] >= row["started_at"]
    checkpoint = json.loads(portal("status", "--json", job).stdout)["last_checkpoint"]
    assert (last["id"], last["bytes"]) == (checkpoint["id"], checkpoint["bytes"])
    assert set(row) == _documented_keys("## `portal jobs --json`")
    status = json.loads(portal("status", "--json", job).stdout)
    assert set(status) == _documented_keys("## `portal status JOB --json`")
    assert set(status["attempts"][0]) == {
        "number",
        "machine",
        "state",
        "started_at",
        "ended_at",
        "exit_code",
        "resumed_from",
    }
    header, line = portal("jobs").stdout.splitlines()
    assert "\x1b" not in header + line  # no colour into a pipe
    assert header.split() == JOBS_HEADER
    cells = line.split()
    assert cells[:2] == [job, "twice"]
    assert re.fullmatch(r"\d+[smhd]", cells[2]) and cells[3] == "ago"
    assert re.fullmatch(r"(\d+[dhm])?\d+[dhms]", cells[4])
    assert cells[5:10] == ["done", "local", "2", "(1", "resumed)"]
    number, unit = units.size(last["bytes"]).split()
    assert cells[10:12] == [number, f"{unit},"]
    assert re.fullmatch(r"\d+[smhd]", cells[12]) and cells[13] == "ago"
    assert cells[14:] == [row["carry"] or "-", "count.py"]
    assert header.index("STATE") == line.index("done")  # columns aligned under their heads
    # no job: every job's row (a column as wide as its values: ages grow)
    assert portal("status").stdout.splitlines()[0].split() == header.split()
    assert json.loads(portal("status", "--json").stdout) == [row]
    explained = json.loads(portal("explain", "--json", "twice").stdout)
    (notice,) = explained["notices"]
    assert explained["job"] == job and notice["source"] == "local" and notice["notice_s"] > 0
    kinds = [d["kind"] for d in notice["decisions"]]
    assert "pausing" in kinds and "paused" in kinds, kinds
    text = portal("explain", "twice").stdout  # the same object, for people
    assert text.startswith(f"job {job}: 1 notice(s)") and notice["message"] in text


def test_plugins_lists_what_each_registers(portal: PortalCli) -> None:
    listed = json.loads(portal("plugins", "--json").stdout)
    kinds = {(r["kind"], r["name"]): r["distribution"] for r in listed["registered"]}
    assert kinds[("notice source", "local")] == "portal-providers-base"
    assert kinds[("notice source", "sigterm")] == "portal-providers-base"
    assert kinds[("storage backend", "fsspec")] == "portal-storage"
    assert kinds[("placement policy", "spot")] == "portal-policies"
    # A plugin that answers a question rather than registers: the simulated cloud's machine check.
    assert kinds[("machine check", "simulated")] == "portal-spot"
    # The settings a plugin declares (portal config set takes them), with their owner.
    assert kinds[("setting", "aws.metadata_endpoint")] == "portal-providers-aws"
    assert kinds[("setting", "sigterm.grace_s")] == "portal-providers-base"
    assert listed["failed"] == []
    loaded = {p["name"]: p for p in listed["plugins"]}
    aws = loaded["aws"]
    assert aws["distribution"] == "portal-providers-aws" and aws["version"] == "0.1.0"
    assert "portal_notice_sources" in aws["hooks"] and "portal_catalogs" in aws["hooks"]
    assert loaded["capture"]["hooks"] == ["portal_capture_extensions", "portal_serializers"]
    text = portal("plugins").stdout
    first, second = text.split("\n\n")
    assert first.splitlines()[0].split() == ["PLUGIN", "DISTRIBUTION", "VERSION", "HOOKS"]
    (aws_row,) = [line.split() for line in first.splitlines() if line.startswith("aws ")]
    assert aws_row[:4] == ["aws", "portal-providers-aws", "0.1.0", "portal_catalogs,"]
    assert second.splitlines()[0].split() == ["KIND", "NAME", "DISTRIBUTION", "WHAT"]


def test_version_and_contradictions(portal: PortalCli) -> None:
    version = portal("--version")
    assert version.returncode == 0 and version.stdout.startswith("portal ")
    both = portal("run", "--no-spot", "--spot-only", "count.py")
    assert both.returncode == 64 and "--no-spot and --spot-only ask for opposite" in both.stderr
    unknown = portal("jobs", "--bogus")  # the command's own usage, where its flags are
    assert unknown.returncode == 64 and unknown.stderr.startswith(
        "usage: portal jobs [-h] [--json]"
    )
    assert "portal: unrecognized arguments: --bogus [INVALID_ARGUMENT]" in unknown.stderr
    negative = portal("wait", "whatever", "--timeout", "-1")
    assert (
        negative.returncode == 64 and "from 0 to 31622400 (366 days), not '-1'" in negative.stderr
    )
    placed = portal("run", "--on", "spot:c7i.large", "count.py")
    assert placed.returncode == 64
    assert "Run it here without --on: `portal run count.py`" in placed.stderr  # no job to resume


def _on_a_terminal(portal: PortalCli, *args: str, **env: str) -> str:
    """What ``portal ARGS`` writes to a terminal (a pseudo-terminal as its stdout)."""
    import os
    import pty
    import subprocess
    import sys

    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "portal.cli", *args],
            cwd=portal.workdir,
            env={**portal.env, "TERM": "xterm-256color", "COLUMNS": "200", **env},
            stdout=follower,
            stderr=subprocess.PIPE,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal's other end is closed: all is read
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks).decode()
    finally:
        os.close(leader)
        if follower != -1:
            os.close(follower)


#: An SGR colour: a foreground or background of the 8/16 colours, or a 256/true colour.
_COLOUR = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:3[0-8]|4[0-8]|9[0-7]|10[0-7])(?:;[0-9;]*)?m")


def test_colour_on_a_terminal_only_and_never_with_no_color(portal: PortalCli) -> None:
    assert portal("run", "--name", "broke", "exits.py", "3").returncode == 3
    coloured = _on_a_terminal(portal, "jobs")
    assert _COLOUR.search(coloured), coloured  # a failed job's state, in red
    plain = _on_a_terminal(portal, "jobs", NO_COLOR="1")
    assert not _COLOUR.search(plain), plain
    assert "failed" in plain
    piped = portal("jobs").stdout
    assert "\x1b" not in piped


def test_a_failed_job_says_why_and_the_way_on(portal: PortalCli) -> None:
    """Its last words on stderr in status (text and --json); with no checkpoint, a resume
    names the command that runs it again; a cancel does not claim checkpoints it never had."""
    (portal.workdir / "bad.py").write_text('print("hi")\nraise RuntimeError("boom: step 3")\n')
    assert portal("run", "--name", "bad", "bad.py", "a b").returncode == 1
    status = json.loads(portal("status", "bad", "--json").stdout)
    assert status["state"] == "failed" and status["error"] == "RuntimeError: boom: step 3"
    (row,) = [r for r in json.loads(portal("jobs", "--json").stdout) if r["name"] == "bad"]
    assert row["error"] == status["error"]
    assert "error     RuntimeError: boom: step 3" in portal("status", "bad").stdout
    resumed = portal("resume", "bad")
    assert resumed.returncode == 64
    assert "it has no checkpoint to resume from: run it again with `portal run bad.py 'a b'`" in (
        resumed.stderr
    )
    (portal.workdir / "wait.py").write_text("import time\ntime.sleep(60)\n")
    job = portal("run", "--detach", "wait.py").stdout.strip()
    cancelled = portal("cancel", job)
    assert cancelled.stderr == f"portal: job {job} cancelled (it had no checkpoint)\n"
