"""Starting a node for a job's next attempt: one way, for the CLI and for a node that moves its job.

The node runs in its own session (it outlives whoever started it), its output goes to the
attempt's ``node.log``, and the attempt's output files exist before anyone follows them. A
simulated machine (:mod:`portal.sim`) gives the node its own working directory and environment.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from portal.control.plane import ControlPlane
from portal.core.domain import Job
from portal.node.periodic import EVERY_ENV, remember_interval, remembered_interval

__all__ = ["launch_node"]


def launch_node(
    plane: ControlPlane,
    job: Job,
    *,
    resume_from: str | None,
    machine: str = "local",
    node_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """Record a new attempt on ``machine`` and start its node; returns the attempt's number."""
    attempt = plane.store.start_attempt(
        job.id, machine=machine, at=plane.clock.now(), resumed_from=resume_from
    )
    directory = plane.paths(job.id).attempt(attempt.number)
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("stdout", "stderr"):
        (directory / name).touch()
    command = [sys.executable, "-m", "portal.node", job.id, str(attempt.number)]
    if resume_from:
        command += ["--resume", resume_from]
    if node_dir is not None:
        # A machine of its own (the simulated cloud's) has its own disk: the job runs in a fresh
        # directory there, and its working-directory files arrive with the checkpoint, as on a
        # new cloud machine.
        workdir = node_dir / "work"
        workdir.mkdir(parents=True, exist_ok=True)
        command += ["--workdir", str(workdir)]
    env = dict(os.environ)
    env["PORTAL_HOME"] = str(plane.home)
    env.update(environ or {})
    _periodic_interval(plane, job, env)
    with (directory / "node.log").open("ab") as log:
        subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
            cwd=node_dir or job.workdir,
        )
    return attempt.number


def _periodic_interval(plane: ControlPlane, job: Job, env: dict[str, str]) -> None:
    """The job's periodic-checkpoint interval for its node: one given now (``--checkpoint-every``
    puts it in PORTAL_CHECKPOINT_EVERY) is remembered for the job's later attempts; without one,
    the remembered one holds."""
    given = env.get(EVERY_ENV, "").strip()
    remembered = remembered_interval(plane, job.id)
    if given and given != remembered:
        # A bad value: the node says it ignores it (the CLI refuses one before this).
        with contextlib.suppress(ValueError):
            remember_interval(plane, job.id, given, "set for this job")
    elif remembered:
        env[EVERY_ENV] = remembered
