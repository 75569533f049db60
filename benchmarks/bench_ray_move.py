"""Time from a notice on a Ray node to the job running again on another Ray node.

Run: ``python benchmarks/bench_ray_move.py [--rounds N]`` (needs portal-ray and Ray installed).

A real three-node Ray cluster on 127.0.0.1 (head on-demand, two spot workers) and a Portal cell
on it. Each round: a job runs on a spot node; ``Cell.notice(node, 60)`` drains the node in Ray,
the agent pauses and checkpoints the job, the placement picks another node and its agent resumes
it. Timed: from the notice to the first line the resumed attempt prints. Next to it, the same
job suspended and resumed on this machine with the plain CLI (``portal notice``, ``portal
resume``), timed the same way, in the same run. Medians are printed; what the Ray move adds is
the drain, the cell's polling and the two agents' round trips.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before Ray is imported

SCRIPT = """\
import time
for step in range(100000):
    print(f"step {step}", flush=True)
    time.sleep(0.02)
"""
_NODE = {"num_cpus": 0, "node_ip_address": "127.0.0.1", "object_store_memory": 80 * 2**20}


def _wait_output(path: Path, timeout: float = 120) -> float:
    """When ``path`` first holds a line (monotonic clock)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and b"\n" in path.read_bytes():
            return time.monotonic()
        time.sleep(0.005)
    raise SystemExit(f"no output in {path} after {timeout:g} s")


def _portal(env: dict[str, str], cwd: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "portal.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


def local_rounds(root: Path, rounds: int) -> list[float]:
    """Notice -> running again, suspended and resumed on this machine with the CLI."""
    env = {**os.environ, "PORTAL_HOME": str(root / "local-home")}
    work = root / "local-work"
    work.mkdir()
    (work / "job.py").write_text(SCRIPT)
    from portal.control.plane import ControlPlane
    from portal.control.views import JobViews
    from portal.core.domain import JobState
    from portal.core.settings import Settings

    views = JobViews(ControlPlane(Settings.load(environ=env)))
    times = []
    for i in range(rounds):
        job = _portal(env, work, "run", "--detach", "--name", f"local-{i}", "job.py").strip()
        home = Path(env["PORTAL_HOME"]) / "jobs" / job / "attempts"
        _wait_output(home / "1" / "stdout")
        started = time.monotonic()
        _portal(env, work, "notice", job, "--seconds", "60")
        while views.job(job).state is not JobState.SUSPENDED:  # polled in process, as the cell does
            time.sleep(0.02)
        _portal(env, work, "resume", job, "--detach")
        times.append(_wait_output(home / "2" / "stdout") - started)
        _portal(env, work, "cancel", job)
    return times


def ray_rounds(root: Path, rounds: int) -> list[float]:
    """Notice on a Ray node -> running again on another node of the cell."""
    import ray
    from ray.cluster_utils import Cluster

    from portal.ray_engine import Cell, NodeKind

    spot = NodeKind.spot_node("c7i.large", 120)
    cluster = Cluster()
    cell = None
    try:
        cluster.add_node(
            **_NODE,
            include_dashboard=False,
            resources=NodeKind.on_demand_node("m7i.large").resources(),
        )
        spots = [cluster.add_node(**_NODE, resources=spot.resources()) for _ in range(2)]
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        cell = Cell(home=root / "ray-home", workroot=root / "ray-work", provider="aws")
        script = root / "job.py"
        script.write_text(SCRIPT)
        times = []
        for i in range(rounds):
            node = spots[i % 2]
            job = cell.submit(script, name=f"ray-{i}", node_id=node.node_id)
            attempts = cell.plane.paths(job)
            _wait_output(attempts.stdout(1))
            started = time.monotonic()
            moves = cell.notice(node.node_id, 60)
            assert moves and moves[0].target not in (None, node.node_id), moves
            times.append(_wait_output(attempts.stdout(2)) - started)
            _portal(dict(os.environ, **cell.environ), root, "cancel", job)
            cluster.remove_node(node)  # reclaimed; a new spot machine joins
            while any(n["NodeID"] == node.node_id and n["Alive"] for n in ray.nodes()):
                time.sleep(0.1)
            spots[i % 2] = cluster.add_node(**_NODE, resources=spot.resources())
            cluster.wait_for_nodes()
            cell.refresh()
        return times
    finally:
        if cell is not None:
            cell.close()
        ray.shutdown()
        cluster.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ray-move-") as tmp:
        root = Path(tmp)
        local = local_rounds(root, options.rounds)
        moved = ray_rounds(root, options.rounds)
    print(f"notice -> running again (median of {options.rounds}):")
    each = lambda xs: ", ".join(f"{x:.2f}" for x in xs)  # noqa: E731
    print(f"  moved to another Ray node   {statistics.median(moved):7.2f} s  ({each(moved)})")
    print(f"  local suspend + resume      {statistics.median(local):7.2f} s  ({each(local)})")
    print(
        f"  ratio                       {statistics.median(moved) / statistics.median(local):7.2f}x"
    )


if __name__ == "__main__":
    main()
