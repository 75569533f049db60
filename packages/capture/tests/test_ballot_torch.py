"""The pause ballot over torch's own store and counters, with real DDP ranks (gloo, CPU,
127.0.0.1, a port from the OS): every rank agrees on one count, arriving skewed, and no rank
hangs; the default group's counter counts DDP's bucket all-reduces (a guard against a torch
change: the ballot compares these counts). And the objects a program holds: an async
collective in flight defers a pause, a completed one and the default group travel."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import free_port

pytest.importorskip("torch")

SCRIPT = Path(__file__).parent / "torch_scripts" / "ballot_ranks.py"


def _ranks(
    tmp_path: Path, world: int, steps: int, pause_at: int, seed: int, skip: str = "-1:-1"
) -> list[dict]:
    port = free_port()
    outs = [tmp_path / f"rank{r}.json" for r in range(world)]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(SCRIPT),
                str(r),
                str(world),
                str(port),
                str(steps),
                str(pause_at),
                str(seed),
                str(outs[r]),
                skip,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
        )
        for r in range(world)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=90)
        assert proc.returncode == 0, err[-2000:]
    return [json.loads(o.read_text()) for o in outs]


@pytest.mark.parametrize(("world", "seed"), [(2, 1), (3, 2), (3, 3)])
def test_every_rank_pauses_at_one_count(tmp_path: Path, world: int, seed: int) -> None:
    results = _ranks(tmp_path, world, steps=12, pause_at=4, seed=seed)
    paused = [r["paused"] for r in results]
    assert all(p is not None for p in paused), results
    assert len({tuple(p["count"]) for p in paused}) == 1, paused  # one count, every rank
    # The drain barrier came after the decision on every rank alike: one more on each.
    assert len({tuple(r["issued"]) for r in results}) == 1, results


def test_ranks_that_wait_for_a_peer_in_the_next_collective_leave_and_agree_later(
    tmp_path: Path,
) -> None:
    """Rank 2 does not join at step 4 (its state there could not be carried) and goes on into
    the step's all-reduces; ranks 0 and 1, standing in the ballot, see it ahead, leave, run on,
    and all three agree at step 5."""
    results = _ranks(tmp_path, 3, steps=12, pause_at=4, seed=5, skip="2:4")
    assert [r["paused"]["step"] for r in results] == [5, 5, 5], results
    assert [r["left"] for r in results] == [1, 1, 0], results
    assert len({tuple(r["paused"]["count"]) for r in results}) == 1


def test_the_groups_counter_counts_ddps_bucket_all_reduces(tmp_path: Path) -> None:
    """Six training steps issue no collective from Python, yet the group's counter is far
    above the one barrier: DDP's reducer all-reduces each small bucket from C++. A torch in
    which the counter missed them would make the ballot compare the wrong thing."""
    (first, _) = _ranks(tmp_path, 2, steps=6, pause_at=10**6, seed=0)
    assert first["paused"] is None
    (issued,) = first["issued"]
    # Per step several buckets (16x16 layers, 1 kB buckets), plus DDP's start-up broadcasts.
    assert issued >= 6 * 4, issued


def test_an_async_collective_in_flight_defers_and_a_completed_one_travels(
    tmp_path: Path,
) -> None:
    script = Path(__file__).parent / "torch_scripts" / "held_objects.py"
    port = free_port()
    outs = [tmp_path / f"held{r}.json" for r in range(2)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(r), str(port), str(outs[r])],
            stderr=subprocess.PIPE,
            text=True,
            env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
        )
        for r in range(2)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=90)
        assert proc.returncode == 0, err[-2000:]
    seen = json.loads(outs[0].read_text())
    assert seen["in_flight"].startswith("an asynchronous collective (async_op=True) is still")
    assert seen["ready_before"] is False and seen["ready_after"] is True
    assert seen["completed"] is True
    assert seen["result"] == [[3.0, 3.0, 3.0, 3.0]]  # 1 + 2, as the original Work holds it
    assert seen["group_is_default"] is True
