"""Portal on a real three-node Ray cluster: notices move jobs, the drain is Ray's own, dead
nodes' jobs resume from their last checkpoint, and dozens of jobs survive random notices.

Python 3.11 only (where the lead's matrix installs Ray for it); one cluster for the module.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time

import pytest
from conftest import SCRIPTS, RayCell

pytest.importorskip("ray")
pytestmark = pytest.mark.skipif(
    sys.version_info[:2] != (3, 11), reason="the Ray cluster tests run on Python 3.11 only"
)

TALLY = SCRIPTS / "tally.py"


def plain_tally(*args: str) -> str:
    """The script's output when nothing interrupts it."""
    return subprocess.run(
        [sys.executable, str(TALLY), *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={"TALLY_DELAY": "0"},
    ).stdout


def expected_tally(seed: int, steps: int) -> str:
    rng = random.Random(seed)
    total, lines = 0, []
    for step in range(steps):
        total += rng.randint(1, 100)
        lines.append(f"step {step} total {total}\n")
    return "".join(lines) + f"final {total}\n"


def test_drain_wrapper_against_the_installed_ray(ray_cell: RayCell) -> None:
    import ray

    from portal.core.errors import InvalidArgumentError
    from portal.ray_engine import drain_node, draining_nodes
    from portal.ray_engine.resources import SPOT

    with pytest.raises(InvalidArgumentError, match="not a node id"):
        drain_node(b"\x01".hex(), 10, "a binary id drains nothing")
    target, other = ray_cell.spot_nodes()
    before = time.time()
    deadline = drain_node(target, 60, "portal test: preemption")
    assert before + 55 < deadline < time.time() + 65
    assert set(draining_nodes()) == {target}
    assert draining_nodes()[target] == pytest.approx(deadline, abs=1)

    # New work that needs a spot node avoids the draining one, in Ray and in the cell.
    @ray.remote(num_cpus=0, resources={SPOT: 0.01})
    def where() -> str:
        return str(ray.get_runtime_context().get_node_id())

    assert set(ray.get([where.remote() for _ in range(4)])) == {other}
    ray_cell.cell.refresh()
    assert ray_cell.cell.node(target).draining
    chosen = ray_cell.cell.choose(None)
    assert chosen is not None and chosen.node_id == other

    replacement = ray_cell.replace(target)
    assert sorted(ray_cell.spot_nodes()) == sorted([other, replacement])
    assert draining_nodes() == {}


def test_job_moves_off_a_node_that_gets_a_notice(ray_cell: RayCell) -> None:
    from portal.core.domain import JobState

    cell = ray_cell.cell
    source = ray_cell.spot_nodes()[0]
    job = cell.submit(TALLY, ["7", "60"], name="moved", node_id=source)
    assert cell.where(job) == source
    ray_cell.wait_for_output(job, "step 10 ")
    moves = cell.notice(source, 30)
    assert [m.job_id for m in moves] == [job]
    target = moves[0].target
    assert target is not None and target != source
    assert cell.node(target).kind.spot  # a spot node whose notice can save it comes first
    assert cell.where(job) == target
    assert cell.wait([job], timeout_s=120) == {job: JobState.DONE}
    assert ray_cell.logs(job) == plain_tally("7", "60")
    explain = ray_cell.portal("explain", job).stdout
    status = ray_cell.portal("status", job).stdout
    assert "attempts  2" in status, status
    assert source[:12] in explain or "suspended" in explain
    ray_cell.replace(source)


def test_many_jobs_with_notices_at_random_moments(ray_cell: RayCell) -> None:
    from portal.core.domain import JobState

    cell = ray_cell.cell
    rng = random.Random(2026)
    count, steps = 24, 60
    notice_after = set(rng.sample(range(4, count), 2))  # two notices, amid the submissions
    jobs: dict[str, int] = {}
    moved = 0
    for i in range(count):
        seed = 100 + i
        jobs[cell.submit(TALLY, [str(seed), str(steps)], name=f"many-{i}")] = seed
        if i in notice_after:
            time.sleep(rng.uniform(0.0, 1.5))
            # A node with a job still running (an early job may have ended already on a
            # loaded machine: a notice to a node holding only ended jobs moves nothing).
            busy = [
                n
                for n in ray_cell.spot_nodes()
                if any(cell.state(j) is JobState.RUNNING for j in cell.jobs_on(n))
            ]
            node = rng.choice(busy)
            moves = cell.notice(node, 20)
            assert all(m.target not in (None, node) for m in moves), moves
            moved += len(moves)
            ray_cell.replace(node)
    states = cell.wait(jobs, timeout_s=240)
    assert states == dict.fromkeys(jobs, JobState.DONE)
    assert moved >= 2
    for job, seed in jobs.items():
        assert ray_cell.logs(job) == expected_tally(seed, steps), job


def test_node_killed_without_notice_resumes_from_the_last_periodic_checkpoint(
    ray_cell: RayCell,
) -> None:
    from portal.core.domain import JobState

    cell = ray_cell.cell
    source = ray_cell.spot_nodes()[0]
    job = cell.submit(TALLY, ["9", "200"], name="killed", node_id=source, checkpoint_every="1s")
    ray_cell.wait_for_output(job, "step 20 ")
    end = time.monotonic() + 60
    while cell.views.store.latest_complete(job) is None:
        assert time.monotonic() < end, "no periodic checkpoint completed"
        time.sleep(0.1)
    ray_cell.kill(source)
    moves = []
    end = time.monotonic() + 120
    while not moves:
        assert time.monotonic() < end, "the job of the dead node was never resumed"
        moves = [m for m in cell.check() if m.job_id == job]
        time.sleep(0.2)
    assert moves[0].reason == "lost"
    assert moves[0].target not in (None, source), moves
    assert cell.wait([job], timeout_s=120) == {job: JobState.DONE}
    # The lost attempt's processes died with its node; the next attempt went on from the
    # checkpoint: its output is exactly the rest of an uninterrupted run, from partway.
    plain = plain_tally("9", "200")
    attempts = cell.plane.store.attempts(job)
    assert [str(a.state) for a in attempts] == ["lost", "exited"], attempts
    assert attempts[1].resumed_from is not None
    resumed = cell.plane.paths(job).stdout(2).read_text()
    assert plain.endswith(resumed) and not resumed.startswith("step 0 "), resumed[:200]
    first = cell.plane.paths(job).stdout(1).read_text()
    assert plain.startswith(first)
