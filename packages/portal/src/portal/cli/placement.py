"""Where ``portal run``, ``portal resume`` and ``portal move`` put a job: the planner over the
installed offers.

With ``cloud: simulated`` (``PORTAL_CLOUD=simulated``) the offers are the simulated cloud's
(:mod:`portal.sim`); a plan is made by :class:`portal.policies.Planner` with the job's state
measured and named (a suspended job's checkpoint as stored; for a running job the check's
rehearsal, else its resident memory now), the pools that reclaimed a machine in the last
30 minutes left out (the control plane records reclaims), and the simulated save rates standing
in for the node's measured ones. The plan's events (``spot aws c7i.large (us-east-1) skipped:
...``) go to the job's log; ``--plan`` prints its D lines and changes nothing.

A brand-new job run with a placement flag (``portal run --memory GIB``, ``--state-gib GIB``,
``--gpu``, ``--on``, ``--no-spot``, ``--spot-only``, ``--plan``) is placed on the offers; without one it starts on this machine and the
offers count from its first resume or move. A new job has no measured state yet: the planner sizes it by what it asked
for (``--state-gib``), a guess, so a spot offer whose notice could not save that much is still used,
with a warning that names the figure. A job run with ``--spot-only`` keeps that wish for every
later resume and move (the ``spot-only`` event of its log records it).

Without a cloud, Portal places jobs on this machine only: the CLI keeps its local resume, and
the options that need offers say so.
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from typing import Any, Protocol

from portal.cli.exits import EXIT_SUSPENDED, note
from portal.cli.ranks import nproc_option
from portal.control import silence, wording
from portal.control.carry import probe_settings_for_job
from portal.control.plane import ControlPlane
from portal.control.store import new_job_id
from portal.control.views import MOVE_EVENTS
from portal.core.domain import CapacityClass, Job, JobState, Offer
from portal.core.errors import InvalidArgumentError, PortalError
from portal.core.specs import StateMeasure
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

__all__ = ["EXIT_STAYS", "Placement", "local_only"]

#: ``portal resume``'s exit status when no offer is left and the job stays suspended.
EXIT_STAYS = EXIT_SUSPENDED
#: ``portal move``'s exit status when no offer is left and the job stays where it is.
EXIT_NOT_MOVED = 1
#: ``portal run``'s exit status when no offer is left and the job is not started.
EXIT_NOT_PLACED = 1
#: How long ``portal move`` waits past the pause notice for the job to be suspended.
_MOVE_GRACE_S = 60.0


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


class Launcher(Protocol):
    """What placement needs of the CLI: the control plane, the store, its jobs, following."""

    plane: ControlPlane

    @property
    def store(self) -> Any: ...

    def follow(self, job: Job, attempt: int) -> int: ...

    def job(self, ref: str) -> Job: ...


class Placement:
    """Plans and carries out resumes and moves over the installed offers."""

    def __init__(self, cli: Launcher) -> None:
        self.cli = cli
        self.plane = cli.plane

    @property
    def enabled(self) -> bool:
        """Whether any cloud's offers are installed (today: the simulated cloud)."""
        return self.plane.settings.cloud == "simulated"

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
        latest = self.cli.store.latest_complete(job.id)
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

    # --- carrying it out -----------------------------------------------------------------------

    def _record(self, plan: Plan) -> None:
        """The plan's events to the job's log; its warnings (an exact ``--on`` over the bound)
        also to the user, who chose it."""
        for event in plan.events(self.plane.clock.now()):
            self.plane.record(event.job_id, event.kind, event.message, event.data)
        for warning in plan.warnings:
            note(f"warning: {warning}")

    def _request(self, action: Action, job: Job, options: argparse.Namespace) -> PlacementRequest:
        """A resume's or move's request from its flags; a spot-only job stays spot only unless
        this command says where (``--on``) or says on-demand (``--no-spot``)."""
        kept = self.spot_only(job) and not options.no_spot and options.on is None
        return PlacementRequest.from_flags(
            action,
            on=options.on,
            gpu=options.gpu,
            no_spot=options.no_spot,
            spot_only=options.spot_only or kept,
            memory_gib=options.memory,
        )

    def _render(self, plan: Plan) -> str:
        """The plan as ``--plan`` prints it, with the checkpoint check's rehearsal line when
        ``capture_probe = full`` and the plan picks spot (the job's environment is this one)."""
        lines = [plan.render()]
        chosen = plan.chosen
        if chosen is not None and chosen.capacity is CapacityClass.SPOT:
            probe = probe_settings_for_job(self.plane.settings, os.environ).capture_probe
            if probe == "full":
                lines.append(wording.plan_no_rehearsal(chosen.describe()))
        return "\n".join(lines)

    def _chosen(self, plan: Plan, options: argparse.Namespace, stays: int) -> Offer | int:
        """The offer to carry the plan out on, or the exit status: ``--plan`` prints it (0);
        otherwise it is recorded, and with nothing chosen the reason is said (``stays``)."""
        if options.plan:
            print(self._render(plan))
            return 0
        self._record(plan)
        if plan.chosen is None:
            note(plan.outcome)
            return stays
        return plan.chosen

    def spot_only(self, job: Job) -> bool:
        """Whether the job was run with ``--spot-only`` (its log's ``spot-only`` event)."""
        return any(event.kind == SPOT_ONLY_EVENT for _, event in self.plane.store.events(job.id))

    def _start(self, job: Job, machine: Machine, plan: Plan, *, resume_from: str | None) -> int:
        # A new job starts in the directory it was run from (its files are there); a resumed one
        # in the machine's own directory, where its working-directory files arrive with the
        # checkpoint, as on a fresh cloud machine.
        attempt = launch_node(
            self.plane,
            job,
            resume_from=resume_from,
            machine=machine.name,
            node_dir=machine.directory if resume_from is not None else None,
            environ=node_environ(machine),
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

    def run(self, options: argparse.Namespace, workdir: str) -> int:
        """``portal run [--memory GIB] [--state-gib GIB] [--gpu MODEL] [--on SPEC] [--no-spot]
        [--spot-only] [--plan] SCRIPT``
        on the offers: planned by what the job asks for, started on a provisioned machine."""
        request = PlacementRequest.from_flags(
            Action.RUN,
            on=options.on,
            gpu=options.gpu,
            no_spot=options.no_spot,
            spot_only=options.spot_only,
        )
        draft = Job(
            id=new_job_id(),
            name=options.name,
            script=options.script,
            args=tuple(options.args),
            workdir=workdir,
            created_at=self.plane.clock.now(),
            memory_gib=options.memory,
            state_gib=options.state_gib,
        )
        plan = self.placing.plan(draft, request, None)
        if options.plan:
            print(self._render(plan))
            return 0
        if plan.chosen is None:
            note(f"{plan.outcome}; the job was not started")
            return EXIT_NOT_PLACED
        job = self.plane.create_job(
            script=options.script,
            args=options.args,
            workdir=workdir,
            name=options.name,
            memory_gib=options.memory,
            state_gib=options.state_gib,
            nproc_per_node=nproc_option(options.nproc_per_node),
        )
        self.cli.store.create_job_key(job.id)
        if options.spot_only:
            self.plane.record(
                job.id,
                SPOT_ONLY_EVENT,
                "this job asks for spot machines only: every resume and move keeps to spot "
                f"(`portal resume {job.name or job.id} --no-spot` overrides it once)",
                spot_only=True,
            )
        plan = self.placing.plan(job, request, None)  # the same plan, now for the job's log
        self._record(plan)
        if plan.chosen is None:  # the offers changed in between: nothing was started
            self.plane.set_state(job.id, JobState.FAILED, expect=[JobState.RUNNING])
            note(f"{plan.outcome}; the job was not started")
            return EXIT_NOT_PLACED
        machine = self.machines.provision(plan.chosen)
        self.plane.record(
            job.id,
            "placed",
            f"placed on {machine.name}: {plan.outcome}",
            machine=machine.id,
            pool=plan.chosen.pool,
        )
        attempt = self._start(job, machine, plan, resume_from=None)
        if options.detach:
            print(job.id, flush=True)
            return 0
        note(f"job {job.id} started on {machine.name}" + (f" ({job.name})" if job.name else ""))
        return self.cli.follow(job, attempt)

    def resume(self, job: Job, ref: Any, options: argparse.Namespace) -> int:
        """``portal resume JOB [--gpu G] [--on SPEC] [--no-spot] [--plan]`` on the offers."""
        request = self._request(Action.RESUME, job, options)
        plan = self.placing.plan(job, request, self.stored_measure(ref))
        chosen = self._chosen(plan, options, EXIT_STAYS)
        if isinstance(chosen, int):
            return chosen
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
        attempt = self._start(job, machine, plan, resume_from=ref.checkpoint_id)
        if options.detach:
            print(job.id, flush=True)
            return 0
        note(f"job {job.id} resuming from checkpoint {ref.checkpoint_id} on {machine.name}")
        return self.cli.follow(job, attempt)

    def move(self, job: Job, options: argparse.Namespace) -> int:
        """``portal move JOB [--on SPEC] [--no-spot] [--plan]``: pause it, resume it elsewhere."""
        ref_text = job.name or job.id
        if not self.enabled:
            raise local_only(f"portal move {ref_text}", ref_text, move=True)
        if job.state is not JobState.RUNNING:
            raise InvalidArgumentError(
                f"job {job.id} is {job.state}, not running: only a running job moves; a "
                f"suspended one resumes where you choose (`portal resume {ref_text} --on SPEC`)",
                details={"job": job.id, "state": str(job.state)},
            )
        # A move asks for a suspend first: refused while the node is silent, in the rules' words.
        silence.refuse_while_silent(self.plane, job, f"moving job {job.id}")
        request = self._request(Action.MOVE, job, options)
        current = self.machines.of_job(job.id)
        plan = self.placing.plan(
            job, request, self.running_measure(job), current.offer if current else None
        )
        chosen = self._chosen(plan, options, EXIT_NOT_MOVED)
        if isinstance(chosen, int):
            return chosen
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
        self._start(job, target, plan, resume_from=ref.checkpoint_id)
        note(f"job {job.id} moved from {where} to {target.name} (checkpoint {ref.checkpoint_id})")
        return 0

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
            state = self.cli.job(job.id).state
            if state not in (JobState.RUNNING, JobState.PAUSING):
                break
            time.sleep(0.1)
        ref = self.cli.store.latest_complete(job.id) if state is JobState.SUSPENDED else None
        if ref is None:
            self.machines.release(target.id)
            raise PortalError(
                f"job {job.id} did not pause for the move (it is {state}); {target.name} is "
                f"released. `portal explain {job.name or job.id}` says what happened at the "
                "notice; try `portal move` again once it is running",
                details={"job": job.id, "state": str(state)},
            )
        return ref
