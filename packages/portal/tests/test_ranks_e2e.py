"""A multi-process job through the whole of Portal: `portal run --nproc-per-node 2` starts the
ranks under the runtime's launcher, `portal notice` pauses them together (one checkpoint, the
set of both ranks' parts), `portal resume` continues both in new processes. The reference is
the same script launched by torchrun itself, uninterrupted: stdout byte for byte, the final
parameters' digest included."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
from conftest import PortalCli

pytest.importorskip("torch")


def _torchrun(portal: PortalCli, *args: str) -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTAL_")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "1",
            "--nproc-per-node",
            "2",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(port),
            *args,
        ],
        cwd=portal.workdir,
        env={**env, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_ranks_pause_on_notice_and_resume_identically(portal: PortalCli) -> None:
    expected = _torchrun(portal, "ddp_steps.py", "150")
    run = portal.start("run", "--name", "ddp", "--nproc-per-node", "2", "ddp_steps.py", "150")
    portal.wait_for_output("ddp", "step 20 ", timeout=120)
    assert portal("notice", "ddp", "--seconds", "120").returncode == 0
    out, err = run.communicate(timeout=120)
    assert run.returncode == 75, err
    assert portal.state("ddp") == "suspended"
    status = json.loads(portal("status", "ddp", "--json").stdout)
    assert status["last_checkpoint"] is not None and status["ranks"] == 2
    assert "ranks     2" in portal("status", "ddp").stdout

    resumed = portal("resume", "ddp", timeout=180)
    assert resumed.returncode == 0, resumed.stderr
    assert out + resumed.stdout == expected
    assert portal("logs", "ddp").stdout == expected
    assert not list(portal.home.rglob("resume.portal*"))
    status = json.loads(portal("status", "ddp", "--json").stdout)
    assert status["state"] == "done"
    assert [a["state"] for a in status["attempts"]] == ["suspended", "exited"]


def test_a_rank_count_out_of_range_is_refused_by_name(portal: PortalCli) -> None:
    refused = portal("run", "--nproc-per-node", "0", "ddp_steps.py")
    assert refused.returncode != 0
    assert "--nproc-per-node 0" in refused.stderr and "e.g. --nproc-per-node 2" in refused.stderr
    assert "Traceback" not in refused.stderr
