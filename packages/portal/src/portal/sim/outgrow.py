"""A job that outgrows its spot machine's notice is moved to on-demand, by its own node.

On a simulated spot machine the node measures the job again at every checkpoint check: the
check's walk (the bytes a checkpoint would pickle now) when it ran whole, else the job
process's resident memory. The placement policy registered as ``spot`` decides on that measure
(its ``watch``: :meth:`portal.policies.SpotPolicy.watch` unless a plugin replaces it): while it fits, nothing happens; once it is
over what the notice can save, the cheapest on-demand machine that fits is provisioned ahead
(event ``spot.provision``), and as soon as it is ready (a simulated machine is ready at once) the
move starts (event ``spot.move``): the node gives its own job a notice, the job pauses and is
saved, and the node starts the job's next attempt on the new machine from that checkpoint.
``spot.move_when_over: false``, a job pinned to this exact machine, or no on-demand machine that
fits leave it where it is with a warning (event ``spot.kept``, once per machine); so does a job run
with ``--spot-only``, which on-demand capacity is not for. A move that
does not happen after all (the pause is abandoned or fails, or the job ends first) releases the
machine provisioned for it (event ``spot.released``), so that nothing is left running and billed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from portal.control.plane import ControlPlane
from portal.core.domain import Decision, JobState, Verdict
from portal.core.plugins import call_factory
from portal.core.specs import RunningJobPolicy
from portal.node.launch import launch_node
from portal.node.measure import resident_bytes
from portal.node.observer import OBSERVER_ENV
from portal.policies import Figure, StateSample, choose
from portal.providers.local import deliver_notice
from portal.sim.machines import MACHINE_ENV, Machine
from portal.sim.placing import SPOT_ONLY_EVENT, SimulatedPlacing

__all__ = ["SpotWatch", "node_environ"]

log = logging.getLogger("portal.sim.outgrow")

#: The placement policy that watches a job on a spot machine, by its registered name.
WATCH_POLICY = "spot"
#: Event kinds, by the spot policy's verdict.
_KINDS = {Verdict.PROVISION: "spot.provision", Verdict.MOVE: "spot.move", Verdict.WARN: "spot.kept"}


def node_environ(machine: Machine) -> dict[str, str]:
    """What a node started on the simulated ``machine`` is given: the machine it runs on, and
    its observer (:class:`SpotWatch`, through :mod:`portal.node.observer`; the node imports
    nothing of the simulator)."""
    return {MACHINE_ENV: machine.id, OBSERVER_ENV: f"{__name__}:SpotWatch.for_node"}


class SpotWatch:
    """The node's side of move-when-over, for one attempt on one simulated spot machine (a
    :class:`portal.node.observer.NodeObserver`)."""

    def __init__(self, plane: ControlPlane, job_id: str, machine: Machine) -> None:
        self.plane = plane
        self.job_id = job_id
        self.machine = machine
        self.placing = SimulatedPlacing(plane)
        self.target: Machine | None = None
        self._warned = False
        self._spot_only_job: bool | None = None
        self._unwatched = False

    @classmethod
    def for_node(
        cls, plane: ControlPlane, job_id: str, environ: Mapping[str, str]
    ) -> SpotWatch | None:
        """A watch when the node runs on a simulated spot machine; None anywhere else."""
        machine_id = environ.get(MACHINE_ENV)
        if not machine_id:
            return None
        try:
            machine = SimulatedPlacing(plane).machines.get(machine_id)
        except Exception as exc:  # the job must run on even if the machine's record is bad
            log.warning("simulated machine %s unknown, its spot watch is off: %s", machine_id, exc)
            return None
        if not machine.offer.capacity.interruptible:
            return None
        return cls(plane, job_id, machine)

    def _spot_only(self) -> bool:
        """Whether the job was run with ``--spot-only`` (its log's ``spot-only`` event)."""
        if self._spot_only_job is None:
            self._spot_only_job = any(
                event.kind == SPOT_ONLY_EVENT for _, event in self.plane.store.events(self.job_id)
            )
        return self._spot_only_job

    def checked(
        self, checked_bytes: int, *, partial: bool, pids: list[int] | None = None
    ) -> list[Decision]:
        """One checkpoint check's report: measure again, and provision then move when over.

        A failure here is logged and the job runs on: the watch never stops the job it guards.
        """
        if self.target is not None:
            return []  # already moving
        try:
            return self._check(checked_bytes, partial=partial, pids=pids)
        except Exception:
            log.exception("the spot watch of job %s failed at this check", self.job_id)
            return []

    def _check(
        self, checked_bytes: int, *, partial: bool, pids: list[int] | None
    ) -> list[Decision]:
        now = self.plane.clock.now()
        samples = []
        if checked_bytes and not partial:
            # a spot machine never rehearses: the bytes are the check's walk's
            samples.append(StateSample(figure=Figure.CHECK_WALK, bytes=checked_bytes, at=now))
        resident = [r for r in (resident_bytes(p) for p in pids or []) if r is not None]
        if resident:
            samples.append(StateSample(figure=Figure.RESIDENT_AND_GPU, bytes=sum(resident), at=now))
        measure = choose(samples)
        if measure is None:
            return []
        policy = self._policy()
        if policy is None:
            return []
        context = self.placing.context(
            measure, self.machine.offer, pinned=self.machine.on, spot_only=self._spot_only()
        )
        decisions = policy.watch(self.plane.job(self.job_id), self.placing.offers(), context)
        for decision in decisions:
            self._carry_out(decision)
        return decisions

    def _policy(self) -> RunningJobPolicy | None:
        """The ``spot`` policy, looked up by name among the installed placement policies (a
        plugin may replace Portal's); None, logged once, when it does not watch running jobs."""
        spec = self.plane.plugins.placement_policy(WATCH_POLICY)
        policy = call_factory(
            spec.factory, {"bounds": self.placing.bounds()}, what=f"policy {WATCH_POLICY!r}"
        )
        if isinstance(policy, RunningJobPolicy):
            return policy
        if not self._unwatched:
            self._unwatched = True
            log.warning("placement policy %r does not watch running jobs", WATCH_POLICY)
        return None

    def _carry_out(self, decision: Decision) -> None:
        data = {**decision.figures, "policy": decision.policy, "verdict": str(decision.verdict)}
        if decision.verdict is Verdict.WARN:
            if not self._warned:
                self._warned = True
                self.plane.record(self.job_id, _KINDS[Verdict.WARN], decision.reason, data)
            return
        if decision.verdict is Verdict.PROVISION and decision.offer is not None:
            self.target = self.placing.machines.provision(decision.offer)
            self.plane.record(
                self.job_id,
                _KINDS[Verdict.PROVISION],
                decision.reason,
                data,
                machine=self.target.id,
            )
        elif decision.verdict is Verdict.MOVE and self.target is not None:
            self.plane.record(
                self.job_id, _KINDS[Verdict.MOVE], decision.reason, data, machine=self.target.id
            )
            deliver_notice(
                self.plane.paths(self.job_id).notices,
                seconds=self.plane.settings.notice_default_s,
                clock=self.plane.clock,
                reason=f"spot: moving the job to {self.target.name}",
            )

    def not_suspended(self, why: str) -> None:
        """The move asked for did not happen (``why``): release the machine provisioned for it.

        The job runs on where it is (or has ended); the next check measures it again and may
        provision anew. Never raises: the node must finish its own work whatever happens here.
        """
        target, self.target = self.target, None
        if target is None:
            return
        try:
            self.placing.machines.release(target.id)
            self.plane.record(
                self.job_id,
                "spot.released",
                f"{target.name}, provisioned for the move off {self.machine.name}, is released: "
                f"{why}",
                machine=target.id,
            )
        except Exception:
            log.exception("releasing %s after a failed move of job %s", target.id, self.job_id)

    def suspended(self, checkpoint_id: str) -> int | None:
        """The job was saved for the move: start its next attempt on the provisioned machine."""
        target = self.target
        if target is None:
            return None
        job = self.plane.set_state(self.job_id, JobState.RUNNING, expect=[JobState.SUSPENDED])
        self.plane.record(
            self.job_id,
            "resuming",
            f"moving off {self.machine.name}: resuming from checkpoint {checkpoint_id} on "
            f"{target.name}",
            checkpoint=checkpoint_id,
            machine=target.id,
            pool=target.offer.pool,
        )
        attempt = launch_node(
            self.plane,
            job,
            resume_from=checkpoint_id,
            machine=target.name,
            node_dir=target.directory,
            environ=node_environ(target),
        )
        self.placing.machines.assign(target, self.job_id, attempt)
        self.placing.machines.release(self.machine.id, kill=False)  # this node ends now
        return attempt
