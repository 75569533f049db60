"""The node's placement watch on a simulated machine: a job that outgrows its spot machine's
notice moves to on-demand, a job that left spot goes back, and a job finds a cheaper machine.

On a simulated machine the node measures the job again at every checkpoint check: the check's
walk (the bytes a checkpoint would pickle now) when it ran whole, else the job's resident and GPU
memory. The placement policies that watch running jobs (``RunningJobPolicy``), looked up by
their registered names so that a plugin may replace Portal's, are asked in turn, and the first
that moves the job decides:

* ``spot`` (on a spot machine): once the measure is over what the notice can save, the cheapest
  on-demand machine that fits is provisioned ahead (event ``spot.provision``), and as soon as it
  is ready (a simulated machine is ready at once) the move starts (event ``spot.move``).
  ``spot.move_when_over: false``, a job pinned to this exact machine, or no on-demand machine
  that fits leave it where it is with a warning (event ``spot.kept``, once per machine); so does
  a job run with ``--spot-only``, which on-demand capacity is not for.
* ``return`` (on an on-demand machine): a cheaper spot offer whose notice can save the state
  with a fifth to spare takes the job back (``return.provision``, ``return.move``); not for a job
  placed ``--no-spot``; ``return.move: false`` turns it off.
* ``cheaper`` (anywhere): a machine that holds the job for at least ``cheaper.min_saving`` less
  (``cheaper.provision``, ``cheaper.move``); ``cheaper.move: false`` turns it off.

A move is the node's own: it gives its job a notice, the job pauses and is saved, and the node
starts the job's next attempt on the new machine from that checkpoint. A move that does not
happen after all (the pause is abandoned or fails, or the job ends first) releases the machine
provisioned for it (event ``<policy>.released``), so that nothing is left running and billed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from portal.control.plane import ControlPlane
from portal.core.domain import Decision, JobState, Verdict
from portal.core.plugins import call_factory
from portal.core.specs import RunningJobPolicy
from portal.node.launch import launch_node
from portal.node.measure import memory_bytes
from portal.node.observer import OBSERVER_ENV
from portal.policies import Figure, StateSample, choose
from portal.policies.plugin import WATCHING
from portal.providers.local import deliver_notice
from portal.sim.machines import MACHINE_ENV, Machine
from portal.sim.placing import SPOT_ONLY_EVENT, SimulatedPlacing

__all__ = ["SpotWatch", "node_environ"]

log = logging.getLogger("portal.sim.outgrow")

#: The setting that lists the placement policies that watch a running job, by their registered
#: names, in the order they are asked (portal.policies declares it; a plugin's policy is listed
#: by its name like Portal's own).
WATCH_SETTING = "placement.watch"
#: Event kinds, by the verdict (prefixed by the deciding policy's name: ``spot.move``).
_KINDS = {Verdict.PROVISION: "provision", Verdict.MOVE: "move", Verdict.WARN: "kept"}


def node_environ(machine: Machine) -> dict[str, str]:
    """What a node started on the simulated ``machine`` is given: the machine it runs on, and
    its observer (:class:`SpotWatch`, through :mod:`portal.node.observer`; the node imports
    nothing of the simulator)."""
    return {MACHINE_ENV: machine.id, OBSERVER_ENV: f"{__name__}:SpotWatch.for_node"}


class SpotWatch:
    """The node's placement watch, for one attempt on one simulated machine (a
    :class:`portal.node.observer.NodeObserver`)."""

    def __init__(self, plane: ControlPlane, job_id: str, machine: Machine) -> None:
        self.plane = plane
        self.job_id = job_id
        self.machine = machine
        self.placing = SimulatedPlacing(plane)
        self.target: Machine | None = None
        self.moving_policy = ""  # the policy whose move is under way
        self._warned: set[str] = set()  # the policies whose warning was recorded
        self._missing: set[str] = set()  # the listed policies said to be not installed
        self._spot_only_job: bool | None = None
        self._unwatched: set[str] = set()
        self._values: dict[str, Any] | None = None

    @classmethod
    def for_node(
        cls, plane: ControlPlane, job_id: str, environ: Mapping[str, str]
    ) -> SpotWatch | None:
        """A watch when the node runs on a simulated machine; None anywhere else."""
        machine_id = environ.get(MACHINE_ENV)
        if not machine_id:
            return None
        try:
            machine = SimulatedPlacing(plane).machines.get(machine_id)
        except Exception as exc:  # the job must run on even if the machine's record is bad
            log.warning("simulated machine %s unknown, its spot watch is off: %s", machine_id, exc)
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
            # the bytes the check's walk pickled (a rehearsal, on on-demand, is told apart)
            samples.append(StateSample(figure=Figure.CHECK_WALK, bytes=checked_bytes, at=now))
        held = memory_bytes(pids or [])
        if held is not None:
            samples.append(StateSample(figure=Figure.RESIDENT_AND_GPU, bytes=held, at=now))
        measure = choose(samples)
        if measure is None:
            return []
        context = self.placing.context(
            measure,
            self.machine.offer,
            pinned=self.machine.on,
            spot_only=self._spot_only(),
            no_spot=self.machine.no_spot,
            extra=self._policy_settings(),
        )
        job = self.plane.job(self.job_id)
        offers = self.placing.offers()
        bounds = self.placing.bounds()
        decided: list[Decision] = []
        for name in self._watching():
            policy = self._policy(name, bounds)
            if policy is None:
                continue
            decisions = policy.watch(job, offers, context)
            for decision in decisions:
                self._carry_out(name, decision)
            decided += decisions
            if self.target is not None:
                break  # a move is under way: the others wait for the next check
        return decided

    def _settings(self) -> dict[str, Any]:
        """The settings as this node's settings stack resolves them, the plugins' included."""
        if self._values is None:
            try:
                self._values = dict(self.plane.settings.with_plugins(self.plane.plugins).values)
            except Exception:  # a bad value was told at the node's start; defaults here
                log.exception("the placement settings could not be read; defaults apply")
                self._values = {}
        return self._values

    def _watching(self) -> tuple[str, ...]:
        """The watching policies' names, in the order they are asked (``placement.watch``)."""
        return tuple(self._settings().get(WATCH_SETTING) or WATCHING)

    def _policy_settings(self) -> dict[str, Any]:
        """The watching policies' own settings (``cheaper.move``, ``acme.limit``...): every one
        under a watching policy's name."""
        names = set(self._watching())
        return {k: v for k, v in self._settings().items() if k.split(".", 1)[0] in names}

    def _policy(self, name: str, bounds: Any) -> RunningJobPolicy | None:
        """The policy registered as ``name`` (a plugin may replace Portal's); None when none is
        installed, or, logged once, when it does not watch running jobs."""
        try:
            spec = self.plane.plugins.placement_policy(name)
        except Exception:  # not installed: nothing watches for it, said once when it was listed
            if self._watching() != WATCHING and name not in self._missing:
                self._missing.add(name)
                self.plane.record(
                    self.job_id,
                    "placement.not-installed",
                    f"placement policy {name!r} is listed in the setting {WATCH_SETTING} but no "
                    "installed plugin registers it: nothing asks it about this job. Install its "
                    "plugin (`portal plugins` lists what is registered), or take it off the list "
                    f"(`portal config set {WATCH_SETTING} ...`)",
                    policy=name,
                )
            return None
        policy = call_factory(spec.factory, {"bounds": bounds}, what=f"policy {name!r}")
        if isinstance(policy, RunningJobPolicy):
            return policy
        if name not in self._unwatched:
            self._unwatched.add(name)
            log.warning("placement policy %r does not watch running jobs", name)
        return None

    def _carry_out(self, name: str, decision: Decision) -> None:
        """Carry out what the policy registered as ``name`` decided (its events are named by
        that registration: ``spot.move``, whoever implements ``spot``)."""
        data = {**decision.figures, "policy": decision.policy, "verdict": str(decision.verdict)}
        verdict = decision.verdict
        if verdict not in _KINDS:
            return
        kind = f"{name}.{_KINDS[verdict]}"
        if verdict is Verdict.WARN:
            if name not in self._warned:
                self._warned.add(name)
                self.plane.record(self.job_id, kind, decision.reason, data)
            return
        if verdict is Verdict.PROVISION and decision.offer is not None and self.target is None:
            self.target = self.placing.machines.provision(decision.offer)
            self.moving_policy = name
            self.plane.record(self.job_id, kind, decision.reason, data, machine=self.target.id)
        elif verdict is Verdict.MOVE and self.target is not None and name == self.moving_policy:
            self.plane.record(self.job_id, kind, decision.reason, data, machine=self.target.id)
            deliver_notice(
                self.plane.paths(self.job_id).notices,
                seconds=self.plane.settings.notice_default_s,
                clock=self.plane.clock,
                reason=f"{name}: moving the job to {self.target.name}",
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
                f"{self.moving_policy or 'spot'}.released",
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
        # The user's placement wishes travel with the job: --no-spot stays off spot.
        self.placing.machines.assign(target, self.job_id, attempt, no_spot=self.machine.no_spot)
        self.placing.machines.release(self.machine.id, kill=False)  # this node ends now
        return attempt
