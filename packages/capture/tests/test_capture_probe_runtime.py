"""The checkpoint check on the control channel: ``{"op": "probe"}`` walks the state at the next
safe point, writes nothing, reports, and the script goes on; a pause asked for meanwhile wins."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _harness import EXIT_PAUSED, Control, connect, runtime, short_dir

DIGEST = """
import hashlib
import time

digest = hashlib.sha256()


def train():
    for step in range(100):
        digest.update(b"x")
        print("step", step, flush=True)
        time.sleep(0.005)


train()
print("final", digest.hexdigest())
"""

BIG = """
import sys
import time

state = [(i, [i]) for i in range(int(sys.argv[1]))]
total = 0
for step in range(int(sys.argv[2])):
    total += step
    print("step", step, total, flush=True)
    time.sleep(0.005)
print("final", total, len(state))
"""


class Job:
    def __init__(self, tmp: Path, source: str, *args: str, env: dict[str, str] | None = None):
        self.script = tmp / "job.py"
        self.script.write_text(textwrap.dedent(source))
        self.args = args
        directory = short_dir()
        self.sock = os.path.join(directory, "c.sock")
        self.checkpoint = tmp / "job.portal"
        self.proc = subprocess.Popen(
            runtime(
                "run",
                "--control",
                self.sock,
                "--checkpoint",
                str(self.checkpoint),
                str(self.script),
                *args,
            ),
            cwd=tmp,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
        )
        assert self.proc.stdout is not None
        self.first = self.proc.stdout.readline()  # the script is in its loop now
        control = connect(self.proc, self.sock)
        assert control is not None
        self.control: Control = control

    def probe(self) -> dict[str, Any]:
        self.control.send({"op": "probe"})
        return self.control.events_until({"probe"})[-1]

    def finish(self) -> tuple[int, bytes]:
        out, _ = self.proc.communicate(timeout=60)
        self.control.close()
        return self.proc.returncode, self.first + out


def plain(tmp: Path, *args: str) -> bytes:
    return subprocess.run(
        [sys.executable, str(tmp / "job.py"), *args], cwd=tmp, capture_output=True, check=True
    ).stdout


@pytest.fixture
def jobs() -> Iterator[list[Job]]:
    started: list[Job] = []
    yield started
    for job in started:
        job.control.close()
        for stream in (job.proc.stdout, job.proc.stderr):
            if stream is not None:
                stream.close()
        if job.proc.poll() is None:
            job.proc.kill()
            job.proc.wait()


def test_probe_names_what_cannot_be_carried_and_the_script_goes_on(
    tmp_path: Path, jobs: list[Job]
) -> None:
    job = Job(tmp_path, DIGEST)
    jobs.append(job)
    report = job.probe()
    assert report["problems"] == [
        {
            "name": "digest",
            "type_name": "_hashlib.HASH",
            "reason": "TypeError: cannot pickle '_hashlib.HASH' object",
            "where": report["where"],
        }
    ]
    assert report["where"].startswith("job.py:") and report["where"].endswith(" in train")
    assert not report.get("partial")
    code, out = job.finish()
    assert code == 0
    assert out == plain(tmp_path)
    assert not job.checkpoint.exists()  # a check writes nothing


def test_clean_probe_reports_size_and_nothing_else(tmp_path: Path, jobs: list[Job]) -> None:
    job = Job(tmp_path, BIG, "1000", "100")
    jobs.append(job)
    first = job.probe()
    assert first.get("problems", []) == [] and first["checked_bytes"] > 1000
    second = job.probe()  # again: the check may be asked any number of times
    assert second.get("problems", []) == []
    code, out = job.finish()
    assert code == 0 and out == plain(tmp_path, "1000", "100")
    assert not job.checkpoint.exists()


def test_a_large_state_is_reported_partial_within_the_budget(
    tmp_path: Path, jobs: list[Job]
) -> None:
    job = Job(tmp_path, BIG, "300000", "100", env={"PORTAL_CAPTURE_PROBE_BUDGET_S": "0.05"})
    jobs.append(job)
    report = job.probe()
    assert report["partial"] is True
    assert report["seconds"] < 1.0
    assert report.get("checked_bytes", 0) < 30 * 300000  # at most the part it walked
    code, out = job.finish()
    assert code == 0 and out == plain(tmp_path, "300000", "100")


def test_a_pause_during_a_probe_stops_it_and_is_taken_at_once(
    tmp_path: Path, jobs: list[Job]
) -> None:
    job = Job(tmp_path, BIG, "400000", "500")
    jobs.append(job)
    full = job.probe()  # how long a whole walk takes here
    assert not full.get("partial") and full["seconds"] > 0.3
    job.control.send({"op": "probe"})
    time.sleep(0.15)  # the walk is under way
    asked = time.monotonic()
    job.control.pause(within=30)
    events = job.control.events_until({"paused"})
    took = time.monotonic() - asked
    assert [e["event"] for e in events if e["event"] == "probe"] == []  # the pause won
    assert took < full["seconds"] + 1.0
    paused = events[-1]
    code, out = job.finish()
    assert code == EXIT_PAUSED and job.checkpoint.exists()
    resumed = subprocess.run(
        runtime("resume", str(job.checkpoint)), cwd=tmp_path, capture_output=True, timeout=60
    )
    assert resumed.returncode == 0, resumed.stderr
    assert out + resumed.stdout == plain(tmp_path, "400000", "500")
    print("full walk", full["seconds"], "pause after", paused["seconds_to_safe_point"])
    assert paused["seconds_to_safe_point"] < min(0.3, full["seconds"] / 3)
