"""Every state a job goes through, end to end through the real CLI in subprocesses (the notice,
suspend and resume loop itself is in test_e2e.py; the node offline in test_node_offline.py; lost
in test_lost.py, since only a job on another machine can be called lost)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import PortalCli

from portal.cli.progress import ProgressLine
from portal.control.liveness import node_alive


def _kinds(portal: PortalCli, job: str) -> list[str]:
    import sqlite3

    db = sqlite3.connect(portal.home / "portal.db")
    try:
        rows = db.execute("SELECT kind FROM events WHERE job_id = ? ORDER BY seq", (job,))
        return [r[0] for r in rows]
    finally:
        db.close()


def test_running_pausing_running_done_when_no_safe_point_comes_in_time(portal: PortalCli) -> None:
    """A 2 s notice while the script holds an open file: the pause is given up at its deadline,
    the job runs on (running again), and ends done."""
    job = portal("run", "--detach", "holds_file.py").stdout.strip()
    portal.wait_for_output(job, "holding 2")
    assert portal("notice", job, "--seconds", "2").returncode == 0
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "done"
    kinds = _kinds(portal, job)
    assert kinds.index("notice") < kinds.index("pausing") < kinds.index("pause-abandoned")
    assert kinds.index("pause-abandoned") < kinds.index("done")
    assert "suspended" not in kinds
    assert "no safe point was reached before the pause deadline" in portal("explain", job).stdout


def test_running_to_cancelled(portal: PortalCli) -> None:
    job = portal("run", "--detach", "count.py", "7").stdout.strip()
    portal.wait_for_output(job, "step 3 ")
    cancelled = portal("cancel", job)
    assert cancelled.returncode == 0 and "cancelled" in cancelled.stderr
    assert portal("wait", job, "--timeout", "10").stdout.strip() == "cancelled"
    pid_file = portal.home / "jobs" / job / "attempts" / "1" / "node.pid"
    deadline = time.monotonic() + 10
    while node_alive(pid_file) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert node_alive(pid_file) is False  # the node (and its job process with it) is gone
    assert "not suspended" in portal("resume", job).stderr
    status = json.loads(portal("status", job, "--json").stdout)
    assert status["attempts"][-1]["state"] == "failed"


def test_wait_with_a_timeout_says_the_job_still_runs(portal: PortalCli) -> None:
    job = portal("run", "--detach", "count.py", "7").stdout.strip()
    waited = portal("wait", job, "--timeout", "0.3")
    assert waited.returncode == 1
    assert waited.stdout.strip() in ("running", "pausing")
    assert f"job {job} is still running after 0.3 s" in waited.stderr
    portal("cancel", job)


@pytest.mark.one_python
def test_logs_follow_goes_through_a_suspension_into_the_next_attempt(portal: PortalCli) -> None:
    """``logs -f`` says the job is suspended, waits, and goes on with the resumed attempt
    (saying where it runs), each line once, until the job ends."""
    expected = portal.plain("count.py", "3")
    job = portal("run", "--detach", "count.py", "3").stdout.strip()
    portal.wait_for_output(job, "step 2 ")
    follower = portal.start("logs", "-f", job)
    portal("notice", job)
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "suspended"
    time.sleep(0.5)
    assert follower.poll() is None, "the follower stopped at the suspension"
    checkpoint = json.loads(portal("status", job, "--json").stdout)["last_checkpoint"]["id"]
    portal("resume", "--detach", job)
    whole, err = follower.communicate(timeout=60)
    assert follower.returncode == 0
    assert whole == expected
    assert f"job {job} is suspended; resume it with `portal resume {job}`" in err
    assert f"attempt 2 on local, resumed from checkpoint {checkpoint}:" in err
    assert portal.state(job) == "done"
    replay = portal("logs", "-f", job)  # an ended job: its whole output, then the end
    assert replay.returncode == 0 and replay.stdout == expected


def test_logs_replay_stdout_and_stderr_in_the_order_they_were_written(portal: PortalCli) -> None:
    """Across a suspension and a resume, ``portal logs`` interleaves the two streams as the job
    wrote them (stdout still to stdout, stderr to stderr); ``--stream`` picks one."""
    # 24 lines, 0.3 s apart: 6 s left after line 2 for the notice to pause it, on a loaded
    # machine too (with 8, a CI run under load saw the job end first).
    lines = 24
    job = portal("run", "--detach", "interleaved.py", str(lines)).stdout.strip()
    portal.wait_for_output(job, "line 2 ")
    portal("notice", job)
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "suspended"
    assert portal("resume", job).returncode == 0
    merged = subprocess.run(
        [sys.executable, "-m", "portal.cli", "logs", job],
        cwd=portal.workdir,
        env=portal.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one pipe: the order the two arrive in is the order shown
        text=True,
        timeout=60,
        check=True,
    ).stdout
    replayed = [line for line in merged.splitlines() if not line.startswith("portal:")]
    assert replayed == [f"line {i} on {'out' if i % 2 == 0 else 'err'}" for i in range(lines)]
    both = portal("logs", job)
    assert both.stdout.splitlines() == [f"line {i} on out" for i in range(0, lines, 2)]
    assert [x for x in both.stderr.splitlines() if x.startswith("line")] == [
        f"line {i} on err" for i in range(1, lines, 2)
    ]
    only_err = portal("logs", job, "--stream", "stderr")
    assert only_err.stdout == ""
    assert [x for x in only_err.stderr.splitlines() if x.startswith("line")] == [
        f"line {i} on err" for i in range(1, lines, 2)
    ]
    only_out = portal("logs", job, "--stream", "stdout")
    assert only_out.stdout == both.stdout
    assert "line 1 on err" not in only_out.stderr


def test_an_attached_run_keeps_progress_off_a_pipe_but_says_the_upload(portal: PortalCli) -> None:
    run = portal.start("run", "count.py", "7")
    job = ""
    while not job:
        listing = portal("jobs").stdout.splitlines()[1:]
        job = listing[0].split()[0] if listing else ""
    portal.wait_for_output(job, "step 4 ")
    portal("notice", job)
    out, err = run.communicate(timeout=60)
    assert run.returncode == 75
    assert "uploading [" not in err and "\r" not in err  # stderr is a pipe here
    assert "portal: checkpoint uploaded: " in err  # the one-line summary
    assert "portal" not in out and "upload" not in out


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_line_on_a_terminal() -> None:
    screen = _Terminal()
    bar = ProgressLine(screen)
    bar.update(
        {"bytes_done": 50_000_000, "expected_bytes": 200_000_000, "rate_bps": 25e6, "eta_s": 6.0}
    )
    bar.update(
        {
            "bytes_done": 200_000_000,
            "expected_bytes": 200_000_000,
            "rate_bps": 40e6,
            "eta_s": 0.0,
            "will_miss_deadline": False,
        }
    )
    bar.end()
    text = screen.getvalue()
    assert text.startswith(
        "\rportal: uploading [######------------------]  25% 50.0 MB of 200.0 MB"
    )
    assert "25.0 MB/s, 6 s left" in text
    assert "100% 200.0 MB of 200.0 MB, 40.0 MB/s, 0 s left" in text and text.endswith("\n")
    piped = io.StringIO()
    ProgressLine(piped).update({"bytes_done": 1})
    assert piped.getvalue() == ""


def test_a_refusal_of_portal_is_a_portal_error_not_the_scripts(
    portal: PortalCli, tmp_path: Path
) -> None:
    """The runtime refuses (here: a control socket path too long for AF_UNIX, from a deep
    TMPDIR): the attached run exits 69 with Portal's error code, not as if the script failed."""
    deep = tmp_path / ("x" * 60) / ("y" * 60)
    deep.mkdir(parents=True)
    portal.env["TMPDIR"] = str(deep)
    result = portal("run", "--name", "refused", "exits.py", "0")
    assert result.returncode == 69, result.stderr
    assert "Portal's error, not the script's" in result.stderr
    assert "[INVALID_ARGUMENT]" in result.stderr and "out line" not in result.stdout
    assert portal.state("refused") == "failed"
    job = json.loads(portal("status", "refused", "--json").stdout)["job"]
    kinds = _kinds(portal, job)
    assert "portal-error" in kinds and "failed" not in kinds  # never the script's failure


def test_a_notice_while_a_resumed_process_is_starting_is_taken_once_it_listens(
    portal: PortalCli,
) -> None:
    """suspended -> running -> pausing -> suspended with the notice delivered the moment the
    resume returns: its node is still downloading and restoring, the runtime not yet listening.
    The pause is asked as soon as it listens (never given up as unreachable)."""
    expected = portal.plain("count.py", "5")
    job = portal("run", "--detach", "count.py", "5").stdout.strip()
    portal.wait_for_output(job, "step 3 ")
    assert portal("notice", job).returncode == 0
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "suspended"

    assert portal("resume", "--detach", job).returncode == 0
    assert portal("notice", job).returncode == 0
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "suspended"
    kinds = _kinds(portal, job)
    second = kinds.index("notice", kinds.index("resuming"))
    assert "pause-unreachable" not in kinds
    assert "pausing" in kinds[second:] and "suspended" in kinds[second:]

    assert portal("resume", job).returncode == 0
    assert portal("logs", job).stdout == expected
