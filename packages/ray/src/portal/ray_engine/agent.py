"""The Portal node agent: a zero-CPU Ray actor pinned to one Ray node, running jobs there.

The agent runs each job as an ordinary process through the ``portal`` command line, exactly as
a user does on one machine: ``portal run --detach --name NAME SCRIPT ARGS``, ``portal notice
JOB``, ``portal resume JOB --detach``. Pausing, checkpointing and resuming are therefore
Portal's own, unchanged; Ray only decides where the agent lives. What the agent adds:

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

from portal.core.errors import InvalidArgumentError, PortalError
from portal.ray_engine.resources import MARK_ENV

__all__ = ["AgentCommandError", "NodeAgent"]

#: Portal's node reads the machine's purchase model from this (see portal.node.supervisor).
PURCHASE_ENV = "PORTAL_NODE_PURCHASE"
#: How long one ``portal`` command may take on the node (it returns once the job is started).
_COMMAND_TIMEOUT_S = 120.0


class AgentCommandError(PortalError):
    """A ``portal`` command the agent ran on its node failed."""

    code = "RAY_AGENT_COMMAND_FAILED"


class NodeAgent:
    """Runs, notifies and resumes Portal jobs on the Ray node it lives on."""

    def __init__(
        self, node_id: str, *, purchase: str, workroot: str, environ: Mapping[str, str]
    ) -> None:
        """``environ``: what every job's ``portal`` sees beyond the worker's own environment
        (``PORTAL_HOME``, ``PORTAL_STORAGE_URL``, ...)."""
        self.node_id = node_id
        self.workroot = Path(workroot)
        self.env = {**os.environ, **environ, PURCHASE_ENV: purchase, MARK_ENV: node_id}
        keeper_env = {k: v for k, v in self.env.items() if k != MARK_ENV}
        subprocess.run(  # the keeper detaches itself: this returns at once
            [sys.executable, "-m", "portal.ray_engine.keeper", node_id, str(os.getpid())],
            env=keeper_env,
            stdin=subprocess.DEVNULL,
            check=True,
            timeout=_COMMAND_TIMEOUT_S,
        )

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
        options: Sequence[str] = (),
    ) -> str:
        """Start ``script_text`` as job ``name`` on this node; returns the job id.

        ``options``: more ``portal run`` options (``--checkpoint-every 30s``)."""
        directory = self.workdir(name)
        (directory / script_name).write_text(script_text, encoding="utf-8")
        out = self._portal(
            "run", "--detach", "--name", name, *options, script_name, *args, cwd=directory
        )
        return out.strip().splitlines()[-1]

    def resume(self, job: str, name: str) -> None:
        """Resume ``job`` here from its last complete checkpoint."""
        self._portal("resume", job, "--detach", cwd=self.workdir(name))

    def notice(self, job: str, seconds: float) -> None:
        """Deliver a preemption notice to ``job``: it pauses at a safe point and checkpoints."""
        self._portal("notice", job, "--seconds", f"{seconds:g}", cwd=self.workroot)

    def _portal(self, *args: str, cwd: Path) -> str:
        cwd.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [sys.executable, "-m", "portal.cli", *args],
            cwd=cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=_COMMAND_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode != 0:
            raise AgentCommandError(
                f"`portal {' '.join(args)}` failed on Ray node {self.node_id} (exit "
                f"{done.returncode}): {done.stderr.strip() or done.stdout.strip()}",
                details={"node_id": self.node_id, "exit": done.returncode},
            )
        return done.stdout
