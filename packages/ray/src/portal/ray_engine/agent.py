"""The Portal node agent: a zero-CPU Ray actor pinned to one Ray node, running jobs there.

The agent runs each job as Portal runs it on one machine, through Portal's own application
layer in the agent's process (:class:`portal.jobs.Portal`: what ``portal run --detach``,
``portal notice`` and ``portal resume --detach`` do, with their rules and refusals); each job's
node is a process of its own, as ``portal run``'s. Pausing, checkpointing and resuming are
therefore Portal's own, unchanged; Ray only decides where the agent lives. What the agent adds:

* the job's working directory: ``<workroot>/<job name>/``, the same path on every node (on a
  real cluster each machine has its own disk; the checkpoint carries the files the job left
  there), the script shipped in by the cell;
* the environment: the cell's ``PORTAL_HOME`` (its control plane) and storage, the node's
  purchase model (``PORTAL_NODE_PURCHASE``: periodic checkpoints are on by default on spot),
  and the node's mark, so that its jobs die with the node (:mod:`portal.ray_engine.keeper`).

The class is plain Python (testable without Ray); :func:`portal.ray_engine.cell.Cell` makes
it an actor with ``NodeAffinitySchedulingStrategy(node_id, soft=False)``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from portal.core.errors import InvalidArgumentError
from portal.core.settings import Settings
from portal.jobs import Portal
from portal.ray_engine.resources import MARK_ENV

__all__ = ["NodeAgent"]

#: Portal's node reads the machine's purchase model from this (see portal.node.supervisor).
PURCHASE_ENV = "PORTAL_NODE_PURCHASE"
#: How long the keeper's start may take.
_COMMAND_TIMEOUT_S = 120.0


class NodeAgent:
    """Runs, notifies and resumes Portal jobs on the Ray node it lives on."""

    def __init__(
        self, node_id: str, *, purchase: str, workroot: str, environ: Mapping[str, str]
    ) -> None:
        """``environ``: the settings of the cell's Portal beyond the worker's own environment
        (``PORTAL_HOME``, ``PORTAL_STORAGE_URL``, ...), which every job's node sees too."""
        self.node_id = node_id
        self.workroot = Path(workroot)
        # What each job's node gets beyond this process's environment: the cell's settings, the
        # machine's purchase model, and the mark that makes it die with this node.
        self.job_env = {**environ, PURCHASE_ENV: purchase, MARK_ENV: node_id}
        self.env = {**os.environ, **self.job_env}
        keeper_env = {k: v for k, v in self.env.items() if k != MARK_ENV}
        subprocess.run(  # the keeper detaches itself: this returns at once
            [sys.executable, "-m", "portal.ray_engine.keeper", node_id, str(os.getpid())],
            env=keeper_env,
            stdin=subprocess.DEVNULL,
            check=True,
            timeout=_COMMAND_TIMEOUT_S,
        )
        # The jobs' directories hold no portal.toml of Portal's: the cell's settings alone count.
        self.portal = Portal.open(settings=Settings.load(environ=self.env, project=False))

    def node(self) -> str:
        """The Ray node this agent runs on (the cell checks it is the one it pinned)."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def workdir(self, name: str) -> Path:
        """The job's working directory on this node (made if missing)."""
        if not name or "/" in name or name in (".", ".."):
            raise InvalidArgumentError(
                f"job name {name!r} cannot name a working directory: give a name without '/'",
                details={"name": name},
            )
        directory = self.workroot / name
        directory.mkdir(parents=True, exist_ok=True)
        return directory

    def run(
        self,
        name: str,
        script_name: str,
        script_text: str,
        args: Sequence[str] = (),
        *,
        checkpoint_every: str | None = None,
        nproc_per_node: int | None = None,
    ) -> str:
        """Start ``script_text`` as job ``name`` on this node; returns the job id.

        ``checkpoint_every``, ``nproc_per_node``: as ``portal run``'s options."""
        directory = self.workdir(name)
        (directory / script_name).write_text(script_text, encoding="utf-8")
        started = self.portal.run(
            script_name,
            args,
            name=name,
            workdir=directory,
            checkpoint_every=checkpoint_every,
            nproc_per_node=nproc_per_node,
            environ=self.job_env,
        )
        return started.job.id

    def resume(self, job: str, name: str) -> None:
        """Resume ``job`` here from its last complete checkpoint."""
        self.portal.resume(job, workdir=self.workdir(name), environ=self.job_env)

    def notice(self, job: str, seconds: float) -> None:
        """Deliver a preemption notice to ``job``: it pauses at a safe point and checkpoints."""
        self.portal.notice(job, seconds)
