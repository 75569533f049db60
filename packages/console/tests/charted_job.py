"""A job with something to chart, made with the real CLI: three checkpoints on two machines.

Attempt 1 and 2 run on this machine (``local``), each suspended by a notice; attempt 3 is
resumed on a simulated spot machine (``--on spot:gcp:e2-standard-2:us-central1``), which its
cloud reclaims. The simulated cloud saves so slowly that a few kB exceed its 30 s notice's
bound, so placement records a warning with the bound: the state chart has one to draw. Used by
the browser tests and by ``benchmarks/bench_console_page.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

from conftest import PortalCli, wait_state

#: The simulated cloud: GCP's 30 s notice at 100 B/s (t0 8 s) saves about 1.1 kB.
CLOUD: dict[str, Any] = {
    "format": 1,
    "providers": {
        "gcp": {
            "spot_notice_s": 30,
            "regions": {"us-central1": {"price_factor": 1.0, "spot_fraction": 0.3}},
            "machine_types": [
                {"name": "e2-standard-2", "vcpus": 2, "memory_gib": 8, "price": 0.067}
            ],
        },
    },
    "storage": {"gcp": {"same_region": {"small": [0.0001, 8]}}},
}
SPOT = "spot:gcp:e2-standard-2:us-central1"

#: Waits at each step while the file ``hold`` exists: the test decides when it moves on.
HELD = """\
import os, time
HOLD = os.path.join({switches!r}, "hold")
total = 0
for step in range(40):
    total += step
    print(f"step {{step}} total {{total}}", flush=True)
    while os.path.exists(HOLD):
        time.sleep(0.02)
print("final", total)
"""


def make_charted_job(portal: PortalCli, name: str = "charts") -> str:
    """The job's id, suspended after its third checkpoint (its second machine reclaimed)."""
    (portal.workdir / "held.py").write_text(HELD.format(switches=str(portal.workdir)))
    (portal.workdir / ".portalignore").write_text("hold\n")
    (portal.workdir / "hold").touch()
    cloud = portal.workdir.parent / "cloud.json"
    cloud.write_text(json.dumps(CLOUD))
    started = portal("run", "--detach", "--name", name, "held.py")
    assert started.returncode == 0, started.stderr
    job = started.stdout.strip()
    for attempt in (1, 2):
        wait_state(portal, job, "running")
        _wait_checked(portal, job, attempt)
        assert portal("notice", job, "--seconds", "30").returncode == 0
        wait_state(portal, job, "suspended")
        if attempt == 1:
            resumed = portal("resume", "--detach", job)
            assert resumed.returncode == 0, resumed.stderr
    sim = PortalCli(portal.home, portal.workdir)
    sim.env.update(PORTAL_CLOUD="simulated", PORTAL_SIMULATED_CLOUD_DATA=str(cloud))
    resumed = sim("resume", "--detach", job, "--on", SPOT)
    assert resumed.returncode == 0, resumed.stderr
    wait_state(portal, job, "running")
    _wait_checked(portal, job, 3)
    reclaimed = _sim_cloud(sim, "reclaim", job)
    assert reclaimed.returncode == 0, reclaimed.stderr
    wait_state(portal, job, "suspended")
    return job


def _wait_checked(portal: PortalCli, job: str, attempt: int, timeout: float = 30) -> None:
    """Until attempt ``attempt``'s runtime answered a check (it listens: a notice pauses it)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        status = portal.status(job)
        carry, attempts = status["carry"], status["attempts"]
        checked = carry.get("ok") and (carry.get("checked_at") or 0) >= attempts[-1]["started_at"]
        if checked and len(attempts) == attempt:
            return
        time.sleep(0.1)
    raise AssertionError(f"attempt {attempt} of {job} was never checked: {portal.status(job)}")


def _sim_cloud(sim: PortalCli, *args: str) -> subprocess.CompletedProcess[str]:
    """The simulated cloud's own console (``python -m portal.sim``)."""
    return subprocess.run(
        [sys.executable, "-m", "portal.sim", *args],
        cwd=sim.workdir,
        env=sim.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
