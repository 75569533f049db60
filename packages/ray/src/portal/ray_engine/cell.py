"""A cell: one Ray cluster (one cloud region) whose nodes run Portal jobs, and its controller.

The controller runs outside Ray's workers (in the driver, or a small service next to the control
plane). It starts a :class:`~portal.ray_engine.agent.NodeAgent` on every Portal node of the
cluster (a zero-CPU actor pinned with ``NodeAffinitySchedulingStrategy(node_id, soft=False)``),
places jobs, and carries out what a notice or a lost node asks:

* :meth:`Cell.notice` (what a provider's notice on a node triggers): the notice is recorded in
  each job's log, the node is drained through Ray's preemption-aware drain
  (:func:`portal.ray_engine.drain.drain_node`), the agent pauses and checkpoints each job there
  (``portal notice``), and each one is resumed on the node the placement chooses (``portal
  resume`` by the agent there);
* :meth:`Cell.check`: nodes Ray declared dead (``ray.nodes()``: ``Alive`` false, after its health
  checks) have their jobs resumed elsewhere from their last complete checkpoint, once Portal has
  settled them (their attempt lost, the job suspended); new nodes get an agent.

Placement follows the rule of Portal's spot policy (:mod:`portal.policies`): a spot node whose
bound (what its notice lets a job save, ``R x (notice - t0) x 0.5``) holds the job's state comes
first, then an on-demand node, then a spot node the state outgrows; the least busy first within
each. When no node can take a job it stays suspended, Ray's autoscaler is asked for an on-demand
node (``request_resources``), and the next :meth:`check` places it.

State shared by the agents: one control plane (``PORTAL_HOME``: here SQLite on the one machine;
in real use a ``portal server`` control plane) and one checkpoint store (``file://`` here, an
``s3://`` bucket in real use).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from portal.core.domain import JobState
from portal.core.errors import InvalidArgumentError, PortalError
from portal.core.settings import Settings
from portal.jobs import Portal
from portal.policies import Bounds, StorageRoute
from portal.ray_engine import drain
from portal.ray_engine.agent import NodeAgent
from portal.ray_engine.resources import ON_DEMAND, NodeKind

__all__ = ["Cell", "CellNode", "Move", "NoNodeError"]

#: How long past a notice's deadline the cell waits for a job to be suspended.
_PAUSE_GRACE_S = 30.0
#: How long the cell waits for Portal to settle a job whose Ray node died.
_SETTLE_S = 60.0
_POLL_S = 0.1


class NoNodeError(PortalError):
    """No node of the cell can take a job now."""

    code = "RAY_NO_NODE"


@attrs.frozen(kw_only=True)
class CellNode:
    """One Portal node of the cell, as the controller sees it."""

    node_id: str
    kind: NodeKind
    alive: bool
    draining: bool = False

    @property
    def short(self) -> str:
        return self.node_id[:12]

    def describe(self) -> str:
        return f"Ray node {self.short} ({self.kind.describe()})"


@attrs.frozen(kw_only=True)
class Move:
    """A job moved (or not) off a node: after a notice or after the node was lost."""

    job_id: str
    name: str
    source: str
    reason: str  # "notice" or "lost"
    target: str | None = None  # None: it stays suspended (see outcome)
    outcome: str = ""


@attrs.define
class _Placed:
    name: str
    node_id: str


class Cell:
    """The controller of one Ray cluster's Portal jobs (``ray.init`` must have been called)."""

    def __init__(
        self,
        *,
        home: str | os.PathLike[str],
        workroot: str | os.PathLike[str],
        provider: str = "local",
        region: str = "local",
        environ: Mapping[str, str] | None = None,
    ) -> None:
        """``home``: the control plane's ``PORTAL_HOME``; ``workroot``: the directory under
        which every node keeps its jobs' working directories; ``environ``: more settings for
        the agents' ``portal`` (``PORTAL_STORAGE_URL``, ``PORTAL_CONTROL_PLANE``...)."""
        import ray

        if not ray.is_initialized():
            raise InvalidArgumentError(
                "a Portal cell drives a Ray cluster: call ray.init(address=...) before Cell()"
            )
        self.provider, self.region = provider, region
        self.workroot = Path(workroot)
        self.environ = {**dict(environ or {}), "PORTAL_HOME": str(Path(home).resolve())}
        self.portal = Portal.open(settings=Settings.load(environ={**os.environ, **self.environ}))
        self.plane = self.portal.plane
        self.views = self.portal.views
        self._bounds = Bounds()
        self._agents: dict[str, Any] = {}
        self._nodes: dict[str, CellNode] = {}
        self._jobs: dict[str, _Placed] = {}
        self._waiting: dict[str, str] = {}  # job -> why it waits for a node
        self._lost: dict[str, float] = {}  # job -> when its node was seen dead
        self.refresh()

    # --- nodes -----------------------------------------------------------------------------------

    def refresh(self) -> list[CellNode]:
        """Read the cluster's nodes; start an agent on each new Portal node."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray_api: Any = ray  # ray.nodes() and ray.remote(**options) are untyped or overloaded
        draining = set(drain.draining_nodes())
        started: list[tuple[str, Any]] = []
        for info in ray_api.nodes():
            node_id = str(info["NodeID"])
            known = self._nodes.get(node_id)
            # A dead node's entry lists no resources: what it was is what the cell knew.
            kind = NodeKind.from_resources(info.get("Resources") or {}) or (
                known.kind if known else None
            )
            if kind is None:
                continue
            alive = bool(info["Alive"]) and (known is None or known.alive)  # dead stays dead
            self._nodes[node_id] = CellNode(
                node_id=node_id, kind=kind, alive=alive, draining=node_id in draining
            )
            if alive and node_id not in self._agents:
                actor = ray_api.remote(num_cpus=0, max_restarts=0, max_concurrency=8)(NodeAgent)
                handle = actor.options(
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
                ).remote(
                    node_id,
                    purchase=kind.purchase,
                    workroot=str(self.workroot),
                    environ=self.environ,
                )
                self._agents[node_id] = handle
                started.append((node_id, handle.node.remote()))
            if not alive:
                self._agents.pop(node_id, None)
        for node_id, where in started:
            actual = ray.get(where, timeout=120)
            if actual != node_id:  # soft=False forbids it; a changed Ray would break the model
                raise PortalError(f"the agent for Ray node {node_id} runs on {actual} instead")
        return self.nodes()

    def nodes(self) -> list[CellNode]:
        return sorted(self._nodes.values(), key=lambda n: n.node_id)

    def node(self, node_id: str) -> CellNode:
        try:
            return self._nodes[node_id]
        except KeyError:
            known = ", ".join(n.short for n in self.nodes()) or "none"
            raise InvalidArgumentError(
                f"Ray node {node_id!r} is not a Portal node of this cell (known: {known}); give "
                "the NodeID of a node started with Portal's resources (portal.spot or "
                "portal.on_demand)",
                details={"node_id": node_id},
            ) from None

    def jobs_on(self, node_id: str) -> list[str]:
        return [job for job, placed in self._jobs.items() if placed.node_id == node_id]

    def where(self, job_id: str) -> str | None:
        placed = self._jobs.get(job_id)
        return placed.node_id if placed else None

    # --- placement --------------------------------------------------------------------------------

    def _state_bytes(self, job_id: str) -> int:
        ref = self.views.store.latest_complete(job_id)
        return int(ref.size_bytes) if ref is not None else 0

    def choose(self, job_id: str | None, *, exclude: Iterable[str] = ()) -> CellNode | None:
        """Where a job goes: spot nodes whose bound holds its state, then on-demand, then the
        rest of spot; the least busy first. None when no node can take it."""
        state = self._state_bytes(job_id) if job_id else 0
        left_out = set(exclude)
        load = {n: len(self.jobs_on(n)) for n in self._nodes}

        def rank(node: CellNode) -> tuple[int, int, str]:
            if node.kind.spot:
                offer = node.kind.offer(provider=self.provider, region=self.region)
                bound = self._bounds.of(offer, StorageRoute.SAME_REGION)
                tier = 0 if bound is None or state <= bound.bytes else 2
            else:
                tier = 1
            return (tier, load[node.node_id], node.node_id)

        candidates = [
            n
            for n in self._nodes.values()
            if n.alive
            and not n.draining
            and n.node_id not in left_out
            and n.node_id in self._agents
        ]
        return min(candidates, key=rank, default=None)

    # --- jobs -------------------------------------------------------------------------------------

    def submit(
        self,
        script: str | os.PathLike[str],
        args: Sequence[str] = (),
        *,
        name: str,
        checkpoint_every: str | None = None,
        nproc_per_node: int | None = None,
        node_id: str | None = None,
    ) -> str:
        """Run ``script`` as job ``name`` on a node of the cell; returns the job id.

        The script's text is shipped to the node. ``checkpoint_every``, ``nproc_per_node``: as
        ``portal run``'s options; ``node_id``: a node of your choice instead of the
        placement's."""
        import ray

        path = Path(script)
        if not path.is_file():
            raise InvalidArgumentError(
                f"script {str(script)!r} not found: give the path of a Python file on this "
                "machine; the cell ships it to the node",
                details={"script": str(script)},
            )
        node = self.node(node_id) if node_id else self.choose(None)
        if node is None or not node.alive or node.draining:
            raise NoNodeError(
                f"no Portal node of this cell can take job {name!r} now (all draining or dead); "
                "add a node with Portal's resources and submit again",
                details={"name": name},
            )
        handle = self._agents[node.node_id]
        text = path.read_text(encoding="utf-8")
        job_id = str(
            ray.get(
                handle.run.remote(
                    name,
                    path.name,
                    text,
                    list(args),
                    checkpoint_every=checkpoint_every,
                    nproc_per_node=nproc_per_node,
                )
            )
        )
        self._jobs[job_id] = _Placed(name=name, node_id=node.node_id)
        self.plane.record(
            job_id,
            "ray.placed",
            f"placed on {node.describe()} of the Ray cell {self.provider}/{self.region}",
            node=node.node_id,
        )
        return job_id

    def state(self, job_id: str) -> JobState:
        """The job's state, settled first if its node died."""
        return self.views.job(job_id).state

    def notice(self, node_id: str, deadline_s: float) -> list[Move]:
        """A provider's notice on ``node_id``: its machine goes in ``deadline_s`` seconds.

        Drains the node through Ray, pauses and checkpoints each of its jobs, and resumes each on
        the node the placement chooses. Returns when every job has moved (or finished)."""
        import ray

        node = self.node(node_id)
        if not node.alive or node_id not in self._agents:
            raise InvalidArgumentError(
                f"{node.describe()} is dead in Ray: a notice comes too late for it; its jobs "
                "resume from their last checkpoint at the next Cell.check()",
                details={"node_id": node_id},
            )
        jobs = [j for j in self.jobs_on(node_id) if self.state(j) is JobState.RUNNING]
        for job in jobs:
            self.plane.record(
                job,
                "ray.notice",
                f"{node.describe()} got a notice: its machine goes in {deadline_s:g} s; "
                "draining it in Ray and moving its jobs",
                node=node_id,
                deadline_s=deadline_s,
            )
        try:
            drain.drain_node(node_id, deadline_s, f"portal: provider notice ({deadline_s:g} s)")
        except drain.DrainRefusedError as refused:  # the jobs move all the same
            for job in jobs:
                self.plane.record(job, "ray.drain-refused", str(refused), node=node_id)
        self._nodes[node_id] = attrs.evolve(node, draining=True)
        handle = self._agents[node_id]
        pending = {job: handle.notice.remote(job, deadline_s) for job in jobs}
        for job, ref in pending.items():
            try:
                ray.get(ref)
            except Exception:
                if not self.state(job).is_final:
                    raise
                # It ended between the listing and its notice: nothing to move.
        end = time.monotonic() + deadline_s + _PAUSE_GRACE_S
        moves: list[Move] = []
        left = list(jobs)
        while left and time.monotonic() < end:
            for job in list(left):
                state = self.state(job)
                if state in (JobState.RUNNING, JobState.PAUSING):
                    continue
                left.remove(job)
                if state is JobState.SUSPENDED:
                    moves.append(self._resume_elsewhere(job, "notice"))
                else:  # it ended before it could pause
                    self._jobs.pop(job, None)
            time.sleep(_POLL_S)
        for job in left:
            moves.append(
                Move(
                    job_id=job,
                    name=self._jobs[job].name,
                    source=node_id,
                    reason="notice",
                    outcome=f"it did not pause within {deadline_s:g} s of the notice",
                )
            )
        return moves

    def _resume_elsewhere(self, job_id: str, reason: str) -> Move:
        import ray
        from ray.autoscaler.sdk import request_resources

        placed = self._jobs[job_id]
        source = placed.node_id
        target = self.choose(job_id, exclude=[source])
        if target is None:
            why = "no other Portal node of the cell is alive and not draining"
            self._waiting[job_id] = why
            with contextlib.suppress(Exception):  # without an autoscaler it is only recorded
                request_resources(bundles=[{ON_DEMAND: 1}])
            self.plane.record(
                job_id,
                "ray.waiting",
                f"stays suspended: {why}; asked Ray's autoscaler for an on-demand node",
            )
            return Move(job_id=job_id, name=placed.name, source=source, reason=reason, outcome=why)
        self._waiting.pop(job_id, None)
        ray.get(self._agents[target.node_id].resume.remote(job_id, placed.name))
        self._jobs[job_id] = _Placed(name=placed.name, node_id=target.node_id)
        was = self._nodes.get(source)
        why = "after a notice on" if reason == "notice" else "its node lost:"
        self.plane.record(
            job_id,
            "ray.moved",
            f"resumed on {target.describe()} ({why} {was.describe() if was else source})",
            node=target.node_id,
            source=source,
            reason=reason,
        )
        return Move(
            job_id=job_id,
            name=placed.name,
            source=source,
            reason=reason,
            target=target.node_id,
            outcome=f"resumed on {target.describe()}",
        )

    def check(self) -> list[Move]:
        """One round of the controller: new nodes get agents, jobs of dead nodes and waiting
        jobs are resumed where the placement chooses. Call it every second or so."""
        self.refresh()
        now = time.monotonic()
        moves: list[Move] = []
        for job, placed in list(self._jobs.items()):
            node = self._nodes.get(placed.node_id)
            if node is None or node.alive:
                continue
            self._lost.setdefault(job, now)
            state = self.state(job)
            if state in (JobState.RUNNING, JobState.PAUSING):
                if now - self._lost[job] > _SETTLE_S:
                    self._lost.pop(job)
                    moves.append(
                        Move(
                            job_id=job,
                            name=placed.name,
                            source=placed.node_id,
                            reason="lost",
                            outcome="Portal did not settle it after its Ray node died",
                        )
                    )
                continue  # Portal has not settled it yet (its processes are going)
            self._lost.pop(job, None)
            if state is JobState.SUSPENDED:
                self.plane.record(
                    job,
                    "ray.node-lost",
                    f"{node.describe()} is dead in Ray (no notice): resuming the job from its "
                    "last complete checkpoint",
                    node=node.node_id,
                )
                moves.append(self._resume_elsewhere(job, "lost"))
            else:
                self._jobs.pop(job)
                moves.append(
                    Move(
                        job_id=job,
                        name=placed.name,
                        source=placed.node_id,
                        reason="lost",
                        outcome=f"the job is {state}: its node died with no checkpoint to resume",
                    )
                )
        for job in list(self._waiting):
            if self.state(job) is JobState.SUSPENDED:
                moves.append(self._resume_elsewhere(job, "notice"))
        for job in list(self._jobs):
            if job not in self._waiting and self.state(job).is_final:
                self._jobs.pop(job)
        return moves

    def wait(self, jobs: Iterable[str], *, timeout_s: float) -> dict[str, JobState]:
        """Run :meth:`check` until every job is final (or ``timeout_s``); their states."""
        wanted = list(jobs)
        end = time.monotonic() + timeout_s
        while True:
            self.check()
            states = {job: self.state(job) for job in wanted}
            if all(s.is_final for s in states.values()) or time.monotonic() >= end:
                return states
            time.sleep(0.2)

    def close(self) -> None:
        """Stop the agents (their keepers stop every job they started)."""
        import ray

        for handle in self._agents.values():
            with contextlib.suppress(Exception):
                ray.kill(handle)
        self._agents.clear()
