"""The parts of portal-ray that need no Ray cluster: node kinds as resources, and the keeper
that takes a node's processes down with it (real processes)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from portal.core.errors import InvalidArgumentError
from portal.ray_engine import NodeKind
from portal.ray_engine.keeper import kill_marked
from portal.ray_engine.resources import MARK_ENV


def test_node_kinds_round_trip_through_ray_resources() -> None:
    spot = NodeKind.spot_node("c7i.large", 120)
    assert spot.resources() == {
        "portal.spot": 1.0,
        "portal.notice_s": 120.0,
        "portal.type:c7i.large": 1.0,
    }
    on_demand = NodeKind.on_demand_node("m7i.large")
    for kind in (spot, on_demand):
        ray_view = {**kind.resources(), "CPU": 2.0, "node:127.0.0.1": 1.0, "memory": 1e9}
        assert NodeKind.from_resources(ray_view) == kind
    assert NodeKind.from_resources({"CPU": 2.0, "node:__internal_head__": 1.0}) is None
    assert spot.describe() == "spot c7i.large (notice 120 s)"
    assert spot.offer(provider="aws", region="us-east-1").notice_s == 120


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: NodeKind(spot=True, machine_type="c7i.large"), "needs its notice length"),
        (lambda: NodeKind(spot=False, machine_type="m7i", notice_s=30), "gets no notice"),
        (lambda: NodeKind.on_demand_node("m7i large"), "is not a type name"),
        (
            lambda: NodeKind.from_resources({"portal.spot": 1, "portal.on_demand": 1}),
            "inconsistent",
        ),
    ],
)
def test_bad_node_kinds_are_refused_with_the_way_out(make: object, words: str) -> None:
    with pytest.raises(InvalidArgumentError, match=words):
        make()  # type: ignore[operator]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_kill_marked_takes_every_marked_process_and_no_other(tmp_path: Path) -> None:
    mark = f"test-{os.getpid()}-{time.monotonic_ns()}"
    marked = subprocess.Popen(
        ["sleep", "60"], env={**os.environ, MARK_ENV: mark}, start_new_session=True
    )
    other = subprocess.Popen(["sleep", "60"], env={**os.environ, MARK_ENV: mark + "-other"})
    try:
        assert kill_marked(mark) == 1
        marked.wait(timeout=10)
        assert not _alive(marked.pid)
        assert _alive(other.pid)
    finally:
        for process in (marked, other):
            process.kill()
            process.wait()


def test_the_keeper_kills_the_nodes_processes_when_the_agent_ends() -> None:
    """An agent stand-in starts the keeper and a detached, marked job, then dies by SIGKILL."""
    mark = f"test-{os.getpid()}-{time.monotonic_ns()}"
    agent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, subprocess, sys, time\n"
            f"subprocess.run([sys.executable, '-m', 'portal.ray_engine.keeper', {mark!r}, "
            "str(os.getpid())], check=True)\n"
            f"job = subprocess.Popen(['sleep', '60'], env={{**os.environ, {MARK_ENV!r}: {mark!r}}},"
            " start_new_session=True)\n"
            "print(job.pid, flush=True)\n"
            "time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert agent.stdout is not None
        job = int(agent.stdout.readline())
        assert _alive(job)
        agent.kill()
        agent.wait(timeout=10)
        end = time.monotonic() + 10
        while _alive(job):
            assert time.monotonic() < end, "the keeper left the node's job running"
            time.sleep(0.05)
    finally:
        agent.kill()
        agent.wait()
        if agent.stdout is not None:
            agent.stdout.close()
        kill_marked(mark)
