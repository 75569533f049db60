"""The CLI's tables for people and for scripts: jobs and explain (with --json), plugins, --version, and
flags that contradict each other refused."""

from __future__ import annotations

import json

from conftest import PortalCli


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
    header, line = portal("jobs").stdout.splitlines()
    assert header.split() == ["JOB", "NAME", "STATE", "ATTEMPTS", "MACHINE", "SCRIPT", "AGE"]
    assert line.split()[:8] == [job, "twice", "done", "2", "(1", "resumed)", "local", "count.py"]
    assert line.split()[-1][-1] in "smhd"
    assert portal("status").stdout.splitlines()[0] == header  # no job: every job's row
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
    text = portal("plugins").stdout
    assert text.splitlines()[0].split() == ["KIND", "NAME", "DISTRIBUTION", "WHAT"]


def test_version_and_contradictions(portal: PortalCli) -> None:
    version = portal("--version")
    assert version.returncode == 0 and version.stdout.startswith("portal ")
    both = portal("run", "--no-spot", "--spot-only", "count.py")
    assert both.returncode == 64 and "--no-spot and --spot-only ask for opposite" in both.stderr
    negative = portal("wait", "whatever", "--timeout", "-1")
    assert negative.returncode == 64 and "a wait takes 0 seconds or more" in negative.stderr
    placed = portal("run", "--on", "spot:c7i.large", "count.py")
    assert placed.returncode == 64
    assert "Run it here without --on: `portal run count.py`" in placed.stderr  # no job to resume
