"""Where :meth:`Portal.run`, :meth:`Portal.resume` and :meth:`Portal.move` (``portal run``,
``portal resume``, ``portal move``) put a job: the planner over the installed offers.

With ``cloud: simulated`` (``PORTAL_CLOUD=simulated``) the offers are the simulated cloud's
(:mod:`portal.sim`); a plan is made by :class:`portal.policies.Planner` with the job's state
measured and named (a suspended job's checkpoint as stored; for a running job the check's
rehearsal, else its resident memory now), the pools that reclaimed a machine in the last
30 minutes left out (the control plane records reclaims), and the simulated save rates standing
in for the node's measured ones. The plan's events (``spot aws c7i.large (us-east-1) skipped:
...``) go to the job's log; its warnings come back to the caller (``said``); a plan asked for
alone (``--plan``) is rendered as its D lines and changes nothing. Nothing here prints.

A brand-new job run with a placement flag (``portal run --memory GIB``, ``--state-gib GIB``,
``--gpu``, ``--on``, ``--no-spot``, ``--spot-only``, ``--plan``) is placed on the offers; without one it starts on this machine and the
offers count from its first resume or move. A new job has no measured state yet: the planner sizes it by what it asked
for (``--state-gib``), a guess, so a spot offer whose notice could not save that much is still used,
with a warning that names the figure. A job run with ``--spot-only`` keeps that wish for every
later resume and move (the ``spot-only`` event of its log records it).

Without a cloud, Portal places jobs on this machine only: :mod:`portal.jobs.session` keeps its
local resume, and the options that need offers say so.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from portal.control import wording
from portal.control.carry import probe_settings_for_job
from portal.control.plane import ControlPlane
from portal.control.store import new_job_id
from portal.control.views import MOVE_EVENTS
from portal.core.domain import CapacityClass, CheckpointRef, Job, JobState
from portal.core.errors import InvalidArgumentError, PortalError
from portal.core.specs import StateMeasure
from portal.jobs.results import Moved, NotPlacedError, Placement, Started
from portal.node.launch import launch_node
from portal.node.measure import memory_bytes
from portal.policies import (
    Action,
    Figure,
    PlacementRequest,
    Plan,
    StateSample,
    choose,
)
from portal.providers.local import deliver_notice
from portal.sim.machines import Machine, SimulatedMachines
from portal.sim.outgrow import node_environ
from portal.sim.placing import SPOT_ONLY_EVENT, SimulatedPlacing

if TYPE_CHECKING:  # the store's modules load only when it is opened
    from portal.storage import CheckpointStore

__all__ = ["OnOffers", "local_only", "offers_installed"]

#: How long a move waits past the pause notice for the job to be suspended.
_MOVE_GRACE_S = 60.0


def offers_installed(plane: ControlPlane) -> bool:
    """Whether any cloud's offers are installed (today: the simulated cloud)."""
    return plane.settings.cloud == "simulated"


def local_only(
    what: str, job_ref: str, *, move: bool = False, script: str | None = None
) -> InvalidArgumentError:
    """The error for an option that needs offers when none are installed (``script``: the
    option was given to ``portal run``, so there is no job yet to resume)."""
    if script is not None:
        way = f"Run it here without {what.split()[0]}: `portal run {script}`"
    elif move:
        way = "Portal has no other machine to move it to"
    else:
        way = f"Resume here with `portal resume {job_ref}`"
    return InvalidArgumentError(
        f"{what}: this Portal places jobs on this machine only (local, no GPU offers installed); "
        f"placing on another machine needs a cloud provider's offers (or the simulated cloud: "
        f"PORTAL_CLOUD=simulated). {way}",
        details={"option": what},
    )


class OnOffers:
    """Plans and carries out runs, resumes and moves over the installed offers.

    ``job``: a job by reference, settled first (:meth:`JobViews.job`); ``store``: the
    checkpoint store, opened by the session on first use."""

    def __init__(
        self, plane: ControlPlane, store: Callable[[], CheckpointStore], job: Callable[[str], Job]
    ) -> None:
        self.plane = plane
        self._store = store
        self._job = job

    @property
    def store(self) -> CheckpointStore:
        return self._store()

    @functools.cached_property
    def placing(self) -> SimulatedPlacing:
        return SimulatedPlacing(self.plane)

    @property
    def machines(self) -> SimulatedMachines:
        return self.placing.machines

    @staticmethod
    def stored_measure(ref: Any) -> StateMeasure:
        """A suspended job's state: its checkpoint as stored, plus a tenth."""
        sample = StateSample(
            figure=Figure.CHECKPOINT_AS_STORED,
            bytes=int(ref.size_bytes),
            at=float(getattr(ref, "created_at", 0.0) or 0.0),
        )
        return sample.measure()

    def running_measure(self, job: Job) -> StateMeasure | None:
        """A running job's state, the latest checkpoint figure first (the check's rehearsal or
        walk, the last move's capsule or its checkpoint as stored), else its resident memory
        now."""
        samples: list[StateSample] = []
        pid: int | None = None
        moved_at: float | None = None
        for _, event in self.plane.store.events(job.id):
            if event.kind == "carry-rehearsal" and event.data.get("bytes"):
                # capture_probe = full on an on-demand machine: a real checkpoint's bytes, at
                # every check (the latest wins)
                samples.append(
                    StateSample(
                        figure=Figure.REHEARSAL, bytes=int(event.data["bytes"]), at=event.at
                    )
                )
            elif event.kind == "carry-ok" and event.data.get("checked_bytes"):
                # the check's walk: the bytes it pickled, nothing written (capture_probe = on)
                samples.append(
                    StateSample(
                        figure=Figure.CHECK_WALK,
                        bytes=int(event.data["checked_bytes"]),
                        at=event.at,
                    )
                )
            elif event.kind == "started" and event.data.get("pid"):
                pid = int(event.data["pid"])  # the latest attempt's job process
            elif event.kind in MOVE_EVENTS:
                moved_at = event.at
        latest = self.store.latest_complete(job.id)
        if latest is not None:
            moved = moved_at is not None and moved_at <= float(latest.created_at)
            figure = Figure.LAST_MOVE_CAPSULE if moved else Figure.CHECKPOINT_AS_STORED
            samples.append(
                StateSample(figure=figure, bytes=int(latest.size_bytes), at=latest.created_at)
            )
        held = memory_bytes([pid]) if pid is not None else None
        if held is not None:
            samples.append(
                StateSample(figure=Figure.RESIDENT_AND_GPU, bytes=held, at=self.plane.clock.now())
            )
        return choose(samples)

    # --- plans ----------------------------------------------------------------------------------

    def _record(self, plan: Plan) -> tuple[str, ...]:
        """The plan's events to the job's log; its warnings (an exact ``--on`` over the bound)
        back to the caller, who chose it."""
        for event in plan.events(self.plane.clock.now()):
            self.plane.record(event.job_id, event.kind, event.message, event.data)
        return tuple(f"warning: {warning}" for warning in plan.warnings)

    def _request(self, action: Action, job: Job, placement: Placement) -> PlacementRequest:
        """A resume's or move's request; a spot-only job stays spot only unless this one says
        where (``on``) or says on-demand (``no_spot``)."""
        kept = self.spot_only(job) and not placement.no_spot and placement.on is None
        return PlacementRequest.from_flags(
            action,
            on=placement.on,
            gpu=placement.gpu,
            no_spot=placement.no_spot,
            spot_only=placement.spot_only or kept,
            memory_gib=placement.memory_gib,
        )

    def render(self, plan: Plan) -> str:
        """The plan as ``--plan`` prints it, with the checkpoint check's rehearsal line when
        ``capture_probe = full`` and the plan picks spot (the job's environment is this one)."""
        lines = [plan.render()]
        chosen = plan.chosen
        if chosen is not None and chosen.capacity is CapacityClass.SPOT:
            probe = probe_settings_for_job(self.plane.settings, os.environ).capture_probe
            if probe == "full":
                lines.append(wording.plan_no_rehearsal(chosen.describe()))
        return "\n".join(lines)

    def spot_only(self, job: Job) -> bool:
        """Whether the job was run with ``--spot-only`` (its log's ``spot-only`` event)."""
        return any(event.kind == SPOT_ONLY_EVENT for _, event in self.plane.store.events(job.id))

    def _draft(
        self,
        script: str,
        args: tuple[str, ...],
        name: str | None,
        workdir: str,
        placement: Placement,
    ) -> Job:
        return Job(
            id=new_job_id(),
            name=name,
            script=script,
            args=args,
            workdir=workdir,
            created_at=self.plane.clock.now(),
            memory_gib=placement.memory_gib,
            state_gib=placement.state_gib,
        )

    def plan_run(
        self, script: str, args: tuple[str, ...], name: str | None, workdir: str,
        placement: Placement,
    ) -> Plan:  # fmt: skip
        """The plan a new job would get (nothing changes)."""
        draft = self._draft(script, args, name, workdir, placement)
        return self.placing.plan(draft, _run_request(placement), None)

    def plan_resume(self, job: Job, ref: CheckpointRef, placement: Placement) -> Plan:
        return self.placing.plan(
            job, self._request(Action.RESUME, job, placement), self.stored_measure(ref)
        )

    def plan_move(self, job: Job, placement: Placement) -> Plan:
        current = self.machines.of_job(job.id)
        return self.placing.plan(
            job,
            self._request(Action.MOVE, job, placement),
            self.running_measure(job),
            current.offer if current else None,
        )

    # --- carrying them out ----------------------------------------------------------------------

    def _start(self, job: Job, machine: Machine, plan: Plan, *, resume_from: str | None,
               environ: dict[str, str]) -> int:  # fmt: skip
        # A new job starts in the directory it was run from (its files are there); a resumed one
        # in the machine's own directory, where its working-directory files arrive with the
        # checkpoint, as on a fresh cloud machine.
        attempt = launch_node(
            self.plane,
            job,
            resume_from=resume_from,
            machine=machine.name,
            node_dir=machine.directory if resume_from is not None else None,
            environ={**environ, **node_environ(machine)},
        )
        on = plan.request.on
        self.machines.assign(
            machine,
            job.id,
            attempt,
            on=on.text if on else None,
            no_spot=plan.request.no_spot,
        )
        return attempt

    def run(
        self, script: str, args: tuple[str, ...], name: str | None, workdir: str,
        placement: Placement, nproc_per_node: int | None, environ: dict[str, str],
    ) -> Started:  # fmt: skip
        """A new job planned by what it asks for, started on a provisioned machine."""
        request = _run_request(placement)
        plan = self.plan_run(script, args, name, workdir, placement)
        if plan.chosen is None:
            raise NotPlacedError(f"{plan.outcome}; the job was not started")
        job = self.plane.create_job(
            script=script,
            args=args,
            workdir=workdir,
            name=name,
            memory_gib=placement.memory_gib,
            state_gib=placement.state_gib,
            nproc_per_node=nproc_per_node,
        )
        self.store.create_job_key(job.id)
        if placement.spot_only:
            self.plane.record(
                job.id,
                SPOT_ONLY_EVENT,
                "this job asks for spot machines only: every resume and move keeps to spot "
                f"(`portal resume {job.name or job.id} --no-spot` overrides it once)",
                spot_only=True,
            )
        plan = self.placing.plan(job, request, None)  # the same plan, now for the job's log
        said = self._record(plan)
        if plan.chosen is None:  # the offers changed in between: nothing was started
            self.plane.set_state(job.id, JobState.FAILED, expect=[JobState.RUNNING])
            raise NotPlacedError(f"{plan.outcome}; the job was not started", said=said, job=job.id)
        machine = self.machines.provision(plan.chosen)
        self.plane.record(
            job.id,
            "placed",
            f"placed on {machine.name}: {plan.outcome}",
            machine=machine.id,
            pool=plan.chosen.pool,
        )
        attempt = self._start(job, machine, plan, resume_from=None, environ=environ)
        return Started(job=job, attempt=attempt, machine=machine.name, said=said)

    def resume(
        self, job: Job, ref: CheckpointRef, placement: Placement, environ: dict[str, str],
        said: tuple[str, ...],
    ) -> Started:  # fmt: skip
        """A suspended job resumed on the offer its plan chose."""
        plan = self.plan_resume(job, ref, placement)
        said += self._record(plan)
        if plan.chosen is None:
            raise NotPlacedError(plan.outcome, said=said, job=job.id)
        chosen = plan.chosen
        self.machines.release_idle()
        self.plane.set_state(job.id, JobState.RUNNING, expect=[JobState.SUSPENDED])
        machine = self.machines.provision(chosen)
        self.plane.record(
            job.id,
            "resuming",
            f"resuming from checkpoint {ref.checkpoint_id} on {machine.name}: {plan.outcome}",
            checkpoint=ref.checkpoint_id,
            machine=machine.id,
            pool=chosen.pool,
        )
        attempt = self._start(job, machine, plan, resume_from=ref.checkpoint_id, environ=environ)
        return Started(
            job=job,
            attempt=attempt,
            machine=machine.name,
            checkpoint=ref.checkpoint_id,
            said=said,
        )

    def move(self, job: Job, placement: Placement) -> Moved:
        """Pause the running job and resume it on the offer its plan chose."""
        plan = self.plan_move(job, placement)
        said = self._record(plan)
        if plan.chosen is None:
            raise NotPlacedError(plan.outcome, said=said, job=job.id)
        chosen = plan.chosen
        current = self.machines.of_job(job.id)
        target = self.machines.provision(chosen)
        where = current.name if current is not None else "this machine (local)"
        self.plane.record(
            job.id,
            "provisioned",
            f"{target.name} provisioned ahead of the move from {where}: {plan.outcome}",
            machine=target.id,
            pool=chosen.pool,
        )
        ref = self._pause_for_move(job, target, where)
        if current is not None:
            self.machines.release(current.id)
        self.plane.set_state(job.id, JobState.RUNNING, expect=[JobState.SUSPENDED])
        self.plane.record(
            job.id,
            "resuming",
            f"moving from {where} to {target.name}: resuming from checkpoint {ref.checkpoint_id}",
            checkpoint=ref.checkpoint_id,
            machine=target.id,
            pool=chosen.pool,
        )
        attempt = self._start(job, target, plan, resume_from=ref.checkpoint_id, environ={})
        return Moved(
            job=job,
            attempt=attempt,
            source=where,
            target=target.name,
            checkpoint=ref.checkpoint_id,
            said=said,
        )

    def _pause_for_move(self, job: Job, target: Machine, where: str) -> Any:
        """Pause the job on its machine (a notice of the default length) and wait for it."""
        seconds = self.plane.settings.notice_default_s
        notice = deliver_notice(
            self.plane.paths(job.id).notices,
            seconds=seconds,
            clock=self.plane.clock,
            reason=f"portal move: to {target.name}",
        )
        self.plane.record(
            job.id,
            "moving",
            f"moving to {target.name}: pausing it on {where} (notice {notice.id}, {seconds:g} s)",
            notice=notice.id,
            machine=target.id,
        )
        end = time.monotonic() + seconds + _MOVE_GRACE_S
        state = job.state
        while time.monotonic() < end:
            state = self._job(job.id).state
            if state not in (JobState.RUNNING, JobState.PAUSING):
                break
            time.sleep(0.1)
        ref = self.store.latest_complete(job.id) if state is JobState.SUSPENDED else None
        if ref is None:
            self.machines.release(target.id)
            raise PortalError(
                f"job {job.id} did not pause for the move (it is {state}); {target.name} is "
                f"released. `portal explain {job.name or job.id}` says what happened at the "
                "notice; try `portal move` again once it is running",
                details={"job": job.id, "state": str(state)},
            )
        return ref


def _run_request(placement: Placement) -> PlacementRequest:
    return PlacementRequest.from_flags(
        Action.RUN,
        on=placement.on,
        gpu=placement.gpu,
        no_spot=placement.no_spot,
        spot_only=placement.spot_only,
    )
