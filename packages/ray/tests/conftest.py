"""A real Ray cluster of three nodes on 127.0.0.1 (one per test module) and a Portal cell on it.

The head node is on-demand and the two workers are spot (2-minute notice), all with no CPUs of
their own (the agents take none; the jobs are Portal's own processes). Every node, the agents
and their jobs are stopped at the end, also when a test fails. The cell's control plane
(``PORTAL_HOME``, SQLite) and checkpoint store (``file://``) are shared by all nodes, since all
run on this machine; in real use they are a ``portal server`` and an ``s3://`` bucket.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Read by Ray when it is imported: otherwise ray.init rewrites 127.0.0.1 to the machine's
# address and hangs. Set before any test module imports Ray.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

SCRIPTS = Path(__file__).parent / "scripts"
SPOT = {"machine_type": "c7i.large", "notice_s": 120.0}
ON_DEMAND = "m7i.large"
# Ray's defaults take about a minute to declare a killed node dead; a few seconds here.
_HEALTH = {
    "health_check_period_ms": 500,
    "health_check_timeout_ms": 500,
    "health_check_failure_threshold": 3,
}
_NODE = {"num_cpus": 0, "node_ip_address": "127.0.0.1", "object_store_memory": 80 * 2**20}


class RayCell:
    """The cluster, the cell on it, and the ``portal`` CLI on the cell's control plane."""

    def __init__(self, cluster: Any, cell: Any, root: Path) -> None:
        self.cluster, self.cell, self.root = cluster, cell, root
        self.env = {**os.environ, **cell.environ}

    def spot_nodes(self) -> list[str]:
        return [n.node_id for n in self.cell.nodes() if n.alive and n.kind.spot]

    def _handle(self, node_id: str) -> Any:
        for handle in self.cluster.list_all_nodes():
            if handle.node_id == node_id:
                return handle
        raise AssertionError(f"no node {node_id} in the cluster")

    def add_spot_node(self) -> str:
        from portal.ray_engine import NodeKind

        kind = NodeKind.spot_node(SPOT["machine_type"], SPOT["notice_s"])
        handle = self.cluster.add_node(**_NODE, resources=kind.resources())
        self.cluster.wait_for_nodes()
        self.cell.refresh()
        return str(handle.node_id)

    def kill(self, node_id: str) -> None:
        """The machine under a Ray node is lost: its raylet and workers die at once."""
        self.cluster.remove_node(self._handle(node_id), allow_graceful=False)

    def replace(self, node_id: str) -> str:
        """The drained machine goes (reclaimed) and a new spot machine joins the cell."""
        import ray

        self.cluster.remove_node(self._handle(node_id))
        end = time.monotonic() + 60
        while any(n["NodeID"] == node_id and n["Alive"] for n in ray.nodes()):
            assert time.monotonic() < end, f"Ray still lists node {node_id} as alive"
            time.sleep(0.1)
        return self.add_spot_node()

    def portal(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "portal.cli", *args],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def logs(self, job: str) -> str:
        return self.portal("logs", job).stdout

    def wait_for_output(self, job: str, needle: str, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if needle in self.logs(job):
                return
            time.sleep(0.1)
        raise AssertionError(f"{needle!r} never appeared in the output of {job}")


@pytest.fixture(scope="module")
def ray_cell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCell]:
    import ray
    from ray.cluster_utils import Cluster

    from portal.ray_engine import Cell, NodeKind
    from portal.ray_engine.keeper import kill_marked

    root = tmp_path_factory.mktemp("cell")
    cluster = Cluster()
    cell = None
    nodes: set[str] = set()
    try:
        on_demand = NodeKind.on_demand_node(ON_DEMAND)
        cluster.add_node(
            **_NODE,
            include_dashboard=False,
            resources=on_demand.resources(),
            _system_config=_HEALTH,
        )
        spot = NodeKind.spot_node(SPOT["machine_type"], SPOT["notice_s"])
        for _ in range(2):
            cluster.add_node(**_NODE, resources=spot.resources())
        if not cluster.address.startswith("127.0.0.1:"):
            raise AssertionError(f"the Ray cluster is at {cluster.address}, not on loopback")
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        cell = Cell(home=root / "home", workroot=root / "work", provider="aws", region="local")
        yield RayCell(cluster, cell, root)
    finally:
        if cell is not None:
            nodes = {n.node_id for n in cell.nodes()}
            cell.close()
        with contextlib.suppress(Exception):
            ray.shutdown()
        cluster.shutdown()
        for node_id in nodes:  # the keepers do this; a test that failed midway may not wait
            kill_marked(node_id)
