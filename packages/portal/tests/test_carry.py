"""The checkpoint check through the real CLI: warning, all clear, blocked, and notices first."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from typing import Any

from conftest import PortalCli


def carry(portal: PortalCli, job: str) -> dict[str, Any]:
    result = portal("status", job, "--json")
    if result.returncode != 0:  # an attached run has not created the job yet
        return {}
    return dict(json.loads(result.stdout)["carry"])


def events(portal: PortalCli, job: str) -> list[dict[str, Any]]:
    """The job's events, read from the control plane's store as the CLI does."""
    with contextlib.closing(sqlite3.connect(portal.home / "portal.db")) as conn:
        conn.row_factory = sqlite3.Row
        rows = conn.execute("SELECT * FROM events WHERE job_id = ? ORDER BY seq", (job,)).fetchall()
    return [{**dict(r), "data": json.loads(r["data"] or "{}")} for r in rows]


def wait_carry(portal: PortalCli, job: str, key: str, timeout: float = 60) -> dict[str, Any]:
    """The job's carry state once it has ``key``. Generous: the first test of a fresh session
    starts its CLI, node and runtime with cold caches, on a machine CI may be loading."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        state = carry(portal, job)
        if state.get(key):
            return state
        time.sleep(0.1)
    raise AssertionError(f"carry never had {key}: {state}")


def test_a_digest_in_a_global_is_warned_in_the_specs_words(portal: PortalCli) -> None:
    portal.env["PORTAL_CAPTURE_PROBE_EVERY_S"] = "0.5"
    run = portal.start("run", "--name", "digest", "holds_digest.py")
    try:
        state = wait_carry(portal, "digest", "warning")
    except AssertionError:
        run.kill()
        run.communicate()
        raise
    assert state["ok"] is False and state["blocked"] is None
    assert [p["name"] for p in state["problems"]] == ["digest"]
    where = state["problems"][0]["where"]
    assert where.startswith("holds_digest.py:") and where.endswith(" in train")
    expected = (
        "A checkpoint of this job cannot carry digest (_hashlib.HASH: TypeError: cannot pickle "
        "'_hashlib.HASH' object). Portal cannot move or suspend it while it holds them, and it "
        "cannot be saved on a notice. If this machine goes, its work since the last checkpoint "
        "would be lost. Create them again after a pause "
        f"point instead of keeping them across one (checked at {where})."
    )
    assert state["warning"] == expected
    text = portal("status", "digest").stdout
    assert f"carry     warning: {expected}" in text
    explain = portal("explain", "digest").stdout
    assert "warn (checkpoint) at" in explain and expected in explain
    out, err = run.communicate(timeout=60)
    assert run.returncode == 0, err
    assert f"portal: {expected}\n" in err
    assert err.count("cannot carry digest") == 1  # one warning per machine and problem
    assert out == portal.plain("holds_digest.py")


def test_a_clean_script_shows_carry_ok(portal: PortalCli) -> None:
    portal.env["PORTAL_CAPTURE_PROBE_EVERY_S"] = "0.3"
    job = portal("run", "--detach", "ticks.py", "60").stdout.strip()
    state = wait_carry(portal, job, "ok")
    assert state["problems"] == [] and state["warning"] is None and state["blocked"] is None
    assert "carry     ok" in portal("status", job).stdout
    assert portal("wait", job, "--timeout", "30").stdout.strip() == "done"


def test_off_checks_nothing(portal: PortalCli) -> None:
    portal.env["PORTAL_CAPTURE_PROBE"] = "off"
    job = portal("run", "--detach", "holds_digest.py").stdout.strip()
    assert portal("wait", job, "--timeout", "30").stdout.strip() == "done"
    assert carry(portal, job)["ok"] is None


def test_a_notice_during_checks_still_suspends_and_resumes_identically(
    portal: PortalCli,
) -> None:
    portal.env["PORTAL_CAPTURE_PROBE_EVERY_S"] = "0.05"  # a check is nearly always under way
    expected = portal.plain("ticks.py", "200")  # time enough for a loaded machine
    job = portal("run", "--detach", "ticks.py", "200").stdout.strip()
    portal.wait_for_output(job, "tick 20 ")
    assert portal("notice", job, "--seconds", "120").returncode == 0
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "suspended"
    paused = [e for e in events(portal, job) if e["kind"] == "paused"]
    assert paused and paused[0]["data"]["seconds_to_safe_point"] < 1.0  # never held up
    resumed = portal("resume", job)
    assert resumed.returncode == 0, resumed.stderr
    assert portal("logs", job).stdout == expected


def test_a_long_native_call_is_reported_blocked_then_clear(portal: PortalCli) -> None:
    portal.env["PORTAL_CAPTURE_BLOCKED_AFTER_S"] = "0.5"
    portal.env["PORTAL_CAPTURE_PROBE_EVERY_S"] = "0.3"
    # Eight seconds in one native call: the blocked state lasts from 0.5 s into the call to its
    # end, long past the few seconds one `portal status` takes on a loaded CI machine (a 2 s call
    # left a window of about one second, which a slow status call missed once on 3.13).
    job = portal("run", "--detach", "native.py", "8").stdout.strip()
    state = wait_carry(portal, job, "blocked")
    assert state["ok"] is False
    assert state["warning"].startswith("This job passed no pause point for 0 s")
    assert "native call" in state["warning"]
    logs = portal.start("logs", "-f", job)
    _, err = logs.communicate(timeout=60)
    assert "portal: This job passed no pause point" in err
    final = carry(portal, job)
    assert final["blocked"] is None and final["ok"] is True
    kinds = [e["kind"] for e in events(portal, job) if e["kind"].startswith("carry-")]
    assert "carry-blocked" in kinds and "carry-unblocked" in kinds[kinds.index("carry-blocked") :]
    assert "carry-unblocked" in portal("explain", job).stdout


def test_full_rehearses_a_real_checkpoint_on_this_on_demand_machine(portal: PortalCli) -> None:
    portal.env["PORTAL_CAPTURE_PROBE"] = "full"
    portal.env["PORTAL_CAPTURE_PROBE_EVERY_S"] = "0.3"
    job = portal("run", "--detach", "ticks.py", "60").stdout.strip()
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "done"
    seen = events(portal, job)
    rehearsals = [e for e in seen if e["kind"] == "carry-rehearsal"]
    assert rehearsals, [e["kind"] for e in seen]
    first = rehearsals[0]
    assert first["data"]["bytes"] > 0 and first["data"]["machine"] == "local"
    assert "rehearsed a real checkpoint on this machine's disk" in first["message"]
    ok = next(e for e in seen if e["kind"] == "carry-ok")
    assert ok["data"]["rehearsal_bytes"] == first["data"]["bytes"]
    assert not [e for e in seen if e["kind"] == "carry-no-rehearsal"]
    assert not list(portal.home.rglob("*.rehearsal"))  # deleted after
    assert not list(portal.workdir.rglob("*.rehearsal"))


def test_full_on_a_spot_machine_checks_without_the_rehearsal(portal: PortalCli) -> None:
    portal.env["PORTAL_CAPTURE_PROBE"] = "full"
    portal.env["PORTAL_CAPTURE_PROBE_EVERY_S"] = "0.3"
    portal.env["PORTAL_NODE_PURCHASE"] = "spot"
    job = portal("run", "--detach", "ticks.py", "40").stdout.strip()
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "done"
    seen = events(portal, job)
    said = [e for e in seen if e["kind"] == "carry-no-rehearsal"]
    assert len(said) == 1 and said[0]["data"]["purchase"] == "spot"
    assert "rehearsal runs on on-demand machines only" in said[0]["message"]
    assert "this is a spot machine" in said[0]["message"]
    assert any(e["kind"] == "carry-ok" for e in seen)  # the check itself ran
    assert not [e for e in seen if e["kind"] == "carry-rehearsal"]


def test_the_purchase_model_the_node_knows() -> None:
    from portal.control.wording import no_rehearsal
    from portal.node.supervisor import purchase_model

    assert purchase_model("local", {}) == "on-demand"
    assert purchase_model("sim-0002 spot aws c7i.large (us-east-1)", {}) == "spot"
    assert purchase_model("sim-0003 on-demand gcp n2 (europe-west4)", {}) == "on-demand"
    assert purchase_model("some-vm", {}) == "unknown"
    assert purchase_model("local", {"PORTAL_NODE_PURCHASE": "spot"}) == "spot"
    assert "was not told this machine's purchase model" in no_rehearsal("unknown")
