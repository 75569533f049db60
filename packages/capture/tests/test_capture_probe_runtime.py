"""The checkpoint check on the control channel: ``{"op": "probe"}`` walks the state at the next
safe point, writes nothing, reports, and the script goes on; a pause asked for meanwhile wins."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
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

    def drain(self) -> tuple[bytes, bytes]:
        """The rest of stdout (through the buffered reader ``readline`` used: communicate()
        would skip what it had read ahead) and stderr, once the process ends."""
        assert self.proc.stdout is not None and self.proc.stderr is not None
        out = self.proc.stdout.read()
        err = self.proc.stderr.read()
        self.proc.wait(timeout=60)
        self.control.close()
        return self.first + out, err

    def finish(self) -> tuple[int, bytes]:
        out, _ = self.drain()
        return self.proc.returncode, out


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


def test_a_million_objects_are_reported_partial_within_the_budget(
    tmp_path: Path, jobs: list[Job]
) -> None:
    """The walk stops at its budget (made small here, so the test does not measure time)."""
    job = Job(tmp_path, BIG, "1000000", "100", env={"PORTAL_CAPTURE_PROBE_BUDGET_S": "0.05"})
    jobs.append(job)
    report = job.probe()
    assert report["partial"] is True and report.get("problems", []) == []
    assert report.get("checked_bytes", 0) < 10 * 1_000_000  # at most the part it walked
    code, out = job.finish()
    assert code == 0 and out == plain(tmp_path, "1000000", "100")


def test_a_pause_asked_for_mid_walk_stops_the_walk_and_is_taken_at_the_same_point(
    tmp_path: Path, jobs: list[Job]
) -> None:
    """Pickling ``wire`` sends the script SIGTERM in the middle of the check: no report comes,
    the walk goes no further (``after``, later in it, is pickled only once: by the checkpoint),
    and the pause is taken at the pause point the check was walking."""
    source = (Path(__file__).parent / "corpus" / "probe" / "tripwire.py").read_text()
    job = Job(tmp_path, source, "400")
    jobs.append(job)
    job.control.send({"op": "probe"})
    events = job.control.events_until({"paused"})
    assert [e["event"] for e in events] == ["pending", "paused"]  # no probe report: the pause won
    assert events[0]["source"] == "sigterm"
    out, err = job.drain()
    assert job.proc.returncode == EXIT_PAUSED and job.checkpoint.exists()
    reduced = err.decode().splitlines()
    wire_lines = [line for line in reduced if line.startswith("wire reduced at line")]
    assert len(wire_lines) == 2  # the check's walk, then the checkpoint
    assert wire_lines[0] == wire_lines[1]  # the same pause point
    assert [line for line in reduced if line.startswith("after")] == [
        wire_lines[0].replace("wire", "after")  # the checkpoint's only: the walk stopped
    ]
    line = int(wire_lines[0].rsplit(" ", 1)[1])
    assert events[-1]["paused_at"] == f"job.py:{line} in <module>"
    resumed = subprocess.run(
        runtime("resume", str(job.checkpoint)), cwd=tmp_path, capture_output=True, timeout=60
    )
    assert resumed.returncode == 0, resumed.stderr
    assert out + resumed.stdout == plain(tmp_path, "400")


STARTUP_THEN_WORK = """
import socket
import time

print("starting", flush=True)
time.sleep(0.5)  # start-up: the first check is taken at the next line
held = socket.socket()  # what the work holds (a writer's connection, say)
for step in range(150):
    print("step", step, flush=True)
    time.sleep(0.01)
held.close()
print("done")
"""


def test_a_check_during_start_up_is_followed_by_one_once_the_work_has_begun(
    tmp_path: Path, jobs: list[Job]
) -> None:
    """The first check comes at the job's first pause point, usually during start-up, before
    what the work holds exists: one more is taken at the work's first pause point (here the
    loop's), and names what the start-up check could not see."""
    job = Job(tmp_path, STARTUP_THEN_WORK)
    jobs.append(job)
    assert job.first == b"starting\n"
    first = job.probe()
    assert not first.get("problems") and first["where"] == "job.py:7 in <module>", first
    second = job.control.events_until({"probe"})[-1]  # not asked for: the runtime's own
    assert second["where"] == "job.py:9 in <module>", second
    assert [(p["name"], p["type_name"]) for p in second["problems"]] == [("held", "socket.socket")]
    returncode, out = job.finish()
    assert returncode == 0 and out == plain(tmp_path)
