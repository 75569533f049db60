"""DDP ranks paused at a step and resumed in new processes, against an uninterrupted run
(gloo, CPU, 127.0.0.1, ports from the OS): every rank's logged losses and parameters bit for
bit. The DDP module comes back through portal.capture.distributed.ddp: on the new default
group, without DDP's broadcast, with the bucket layout it had. With three ranks, DDP's initial
layout (what a plain unpickling gives) sums in another order and the run differs, which is why
the layout travels: the last test shows the difference is real."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import free_port

pytest.importorskip("torch")

SCRIPT = Path(__file__).parent / "torch_scripts" / "ddp_resume.py"
STEPS = 16


def _ranks(
    mode: str,
    world: int,
    pause: int,
    folder: Path,
    layout: str = "recorded",
    subgroups: bool = False,
) -> list:
    port = free_port()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(SCRIPT),
                mode,
                str(rank),
                str(world),
                str(port),
                str(STEPS),
                str(pause),
                str(folder / "parts"),
                str(folder / f"{mode}{rank}.json"),
                layout,
                "1" if subgroups else "0",
            ],
            stderr=subprocess.PIPE,
            text=True,
            env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
        )
        for rank in range(world)
    ]
    expected = 75 if mode == "pause" else 0
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == expected, err[-3000:]
    if mode == "pause":
        return []
    return [json.loads((folder / f"{mode}{rank}.json").read_text()) for rank in range(world)]


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> dict[int, list]:
    """The uninterrupted runs, by world size."""
    return {w: _ranks("plain", w, 0, tmp_path_factory.mktemp(f"plain{w}")) for w in (2, 3)}


@pytest.mark.parametrize(("world", "pause"), [(2, 5), (3, 9)])
def test_ranks_resumed_in_new_processes_are_bit_identical(
    tmp_path: Path, plain: dict[int, list], world: int, pause: int
) -> None:
    _ranks("pause", world, pause, tmp_path)
    resumed = _ranks("resume", world, pause, tmp_path)
    assert len(resumed[0]["log"]) == STEPS
    assert resumed == plain[world]


def test_with_ddps_initial_layout_three_ranks_would_differ(
    tmp_path: Path, plain: dict[int, list]
) -> None:
    _ranks("pause", 3, 9, tmp_path, layout="initial")
    resumed = _ranks("resume", 3, 9, tmp_path, layout="initial")
    assert resumed[0]["log"][:9] == plain[3][0]["log"][:9]  # the same run up to the pause
    assert resumed != plain[3]  # and another sum order after it


def test_groups_made_with_new_group_are_replayed_before_the_state_loads(tmp_path: Path) -> None:
    """Three ranks also all-reduce on two subgroups ({0, 1} and {1, 2}) they hold in their
    state; resumed in new processes, each rank replays the group log on the new rendezvous, its
    state's references point at the new groups, and every logged value is as before."""
    (tmp_path / "plain").mkdir()
    plain = _ranks("plain", 3, 0, tmp_path / "plain", subgroups=True)
    assert any(line.startswith("g12:") for line in plain[2]["log"])
    _ranks("pause", 3, 6, tmp_path, subgroups=True)
    resumed = _ranks("resume", 3, 6, tmp_path, subgroups=True)
    assert resumed == plain
