""":class:`Portal`: Portal as a library, the one door the ``portal`` command, the console, the
MCP server and a scheduler's own loop all go through.

``Portal.open()`` builds what every action needs, once: the settings, the plugins, the control
plane of one ``PORTAL_HOME`` (or the remote one the settings name), its read views
(:class:`~portal.control.views.JobViews`) and the checkpoint store, opened on first use. Each
action decides what ``portal run / resume / move / notice / cancel`` decide, in the same words,
and answers with a typed value (:mod:`portal.jobs.results`) or raises a
:class:`~portal.core.errors.PortalError` with its stable code. Nothing here prints or reads a
terminal: a question only a person can answer (resume from an earlier checkpoint?) is asked
through the ``confirm`` the caller passes, and what a person should be told comes back in
``said``.

A new attempt's node is a process of its own (it outlives the caller, as ``portal run
--detach``'s does); :meth:`Portal.wait` and :meth:`Portal.events` follow it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from portal.control import silence
from portal.control.checkpoints import CheckpointView, job_checkpoints
from portal.control.plane import ControlPlane
from portal.control.store import JobStateConflictError
from portal.control.views import JobViews
from portal.core import units
from portal.core.clock import SYSTEM_CLOCK, Clock
from portal.core.domain import AttemptState, CheckpointRef, Event, Job, JobState
from portal.core.errors import InvalidArgumentError
from portal.core.plugins import Plugins
from portal.core.settings import Settings
from portal.jobs.checks import (
    ENDED,
    checked_script,
    named_as,
    node_environ,
    not_resumable,
    optional_path,
    refuse_offers_for_resume,
    refuse_offers_for_run,
    resumable_states,
)
from portal.jobs.listing import Explanation, JobSummary
from portal.jobs.output import STREAMS, Output, Said, job_output
from portal.jobs.placement import OnOffers, local_only, offers_installed
from portal.jobs.ranks import nproc_option
from portal.jobs.results import Cancelled, JobRef, Moved, NoticeSent, Placement, Started
from portal.jobs.resume_point import resume_point
from portal.jobs.status import JobStatus
from portal.node.launch import NodeStartError, launch_node, resume_workdir
from portal.node.periodic import checkpoint_every_option, note_periodic_resume
from portal.node.spool import store_kept
from portal.providers.local import deliver_notice

if TYPE_CHECKING:
    from portal.storage import CheckpointStore

__all__ = ["ACTIVE", "ENDED_WAITING", "Portal"]

#: The states a job is at work in: :meth:`Portal.wait` waits while a job is in one.
ACTIVE = frozenset({JobState.RUNNING, JobState.PAUSING})
#: What :meth:`Portal.wait` waits for by default: any state but running or pausing.
ENDED_WAITING = frozenset(set(JobState) - ACTIVE)


class Portal:
    """Jobs of one control plane, as a library. Open it with :meth:`open`; close it (or use it
    as a context manager) to close the control plane's connection.

    >>> with Portal.open() as portal:                       # doctest: +SKIP
    ...     started = portal.run("train.py", ["--epochs", "3"], name="mnist")
    ...     portal.notice(started.job, seconds=30)
    ...     portal.wait(started.job).state
    <JobState.SUSPENDED: 'suspended'>
    """

    def __init__(self, plane: ControlPlane) -> None:
        """Over an open control plane (:meth:`open` builds one)."""
        self.plane = plane
        self.views = JobViews(plane)  # what status, explain, the console and MCP show
        self._offers = OnOffers(plane, lambda: self.store, self.job)

    @classmethod
    def open(
        cls,
        home: str | os.PathLike[str] | None = None,
        *,
        plugins: Plugins | None = None,
        settings: Settings | None = None,
        clock: Clock | None = None,
    ) -> Portal:
        """The jobs of ``home`` (default: PORTAL_HOME, else ``~/.portal``) with the settings
        every layer gives there (``settings``: the caller's own, already loaded), the installed
        plugins (``plugins``: the embedder's, e.g. with its own notice sources registered) and
        ``clock`` (a simulated one, in a scheduler's tests)."""
        if settings is None:
            environ = dict(os.environ)
            if home is not None:
                environ["PORTAL_HOME"] = str(home)
            settings = Settings.load(environ=environ, plugins=plugins)
        elif home is not None and Path(home).expanduser().absolute() != settings.home:
            raise InvalidArgumentError(
                f"home {home} and the settings' home {settings.home} differ: give one of them",
                details={"home": str(home), "settings_home": str(settings.home)},
            )
        return cls(ControlPlane(settings, clock=clock or SYSTEM_CLOCK, plugins=plugins))

    def close(self) -> None:
        """Close the control plane's connection (nothing of a running job's is touched)."""
        with contextlib.suppress(Exception):
            self.plane.store.close()

    def __enter__(self) -> Portal:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def settings(self) -> Settings:
        return self.plane.settings

    @property
    def store(self) -> CheckpointStore:
        """The checkpoint store of these jobs, opened on first use."""
        return self.views.store

    @property
    def offers_installed(self) -> bool:
        """Whether a cloud's offers are installed (else every job runs on this machine)."""
        return offers_installed(self.plane)

    def job(self, ref: JobRef) -> Job:
        """A job as it is now, by id or name (or a :class:`Job` read earlier), settled first
        when its node died without reporting."""
        return self.views.job(ref.id if isinstance(ref, Job) else ref)

    # --- starting -------------------------------------------------------------------------------

    def run(
        self,
        script: str | os.PathLike[str],
        args: Iterable[str] = (),
        *,
        name: str | None = None,
        workdir: str | os.PathLike[str] | None = None,
        placement: Placement | None = None,
        nproc_per_node: int | None = None,
        checkpoint_every: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Started:
        """Start ``script`` with ``args`` as a new job, in ``workdir`` (default: the current
        directory), on this machine or, with a cloud's offers installed and a ``placement``
        that asks for something, on the offer its plan chooses. ``checkpoint_every``: its
        periodic checkpoints (``30m``, ``off``, ``auto``; default PORTAL_CHECKPOINT_EVERY, else
        the setting). ``environ``: what its node and script see beyond this process's
        environment. Returns once its node is started."""
        script, args, where = checked_script(script, args, workdir, checkpoint_every, environ)
        placement = placement or Placement()
        every = node_environ(checkpoint_every, environ)
        ranks = nproc_option(nproc_per_node)
        if self.offers_installed and placement.asks:
            # Placed on the cloud's offers when asked to be; otherwise it starts here, and the
            # offers count from its first resume or move.
            return self._offers.run(script, args, name, where, placement, ranks, every)
        refuse_offers_for_run(placement, script)
        job = self.plane.create_job(
            script=script,
            args=args,
            workdir=where,
            name=name,
            memory_gib=placement.memory_gib,
            state_gib=placement.state_gib,
            nproc_per_node=ranks,
        )
        try:
            self.store.create_job_key(job.id)
            attempt = launch_node(self.plane, job, resume_from=None, environ=every)
        except BaseException as exc:  # nothing runs: the job must not look as if it did
            self.plane.set_state(job.id, JobState.FAILED)
            self.plane.record(
                job.id, "start-failed", f"job {job.id} did not start: {type(exc).__name__}: {exc}"
            )
            raise
        return Started(job=job, attempt=attempt)

    def plan_run(
        self,
        script: str | os.PathLike[str],
        args: Iterable[str] = (),
        *,
        name: str | None = None,
        workdir: str | os.PathLike[str] | None = None,
        placement: Placement | None = None,
        checkpoint_every: str | None = None,
    ) -> str:
        """Where :meth:`run` would start the job, as ``portal run --plan`` prints it; nothing
        changes."""
        script, args, where = checked_script(script, args, workdir, checkpoint_every, None)
        placement = placement or Placement()
        if self.offers_installed:
            return self._offers.render(self._offers.plan_run(script, args, name, where, placement))
        refuse_offers_for_run(placement, script)
        return "D8 choice: this machine (local, on-demand); nothing else is installed"

    def resume(
        self,
        job: JobRef,
        *,
        checkpoint: str | None = None,
        use_earlier: bool = False,
        placement: Placement | None = None,
        workdir: str | os.PathLike[str] | None = None,
        checkpoint_every: str | None = None,
        confirm: Callable[[str], bool] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Started:
        """Continue a suspended (or lost) job from its last complete checkpoint, or from
        ``checkpoint`` (a failed or cancelled job too, when it is named). ``use_earlier``: take
        the newest resumable checkpoint when the last recorded one is damaged or gone (else
        ``confirm(question)`` is asked, when given, and the resume is refused without a yes).
        ``workdir``: another directory on this machine to run it in (its files come with the
        checkpoint); ``environ``: what its node and script see beyond this process's
        environment."""
        found, ref, said = self._resume_point(
            job, checkpoint, use_earlier, placement, workdir, checkpoint_every, confirm
        )
        every = node_environ(checkpoint_every, environ)
        if self.offers_installed:
            return self._offers.resume(found, ref, placement or Placement(), every, said)
        # Its directory here is checked (made, when given) before anything changes.
        resume_workdir(self.plane, found, optional_path(workdir), named_as(job))
        resumable = resumable_states(found, named_checkpoint=checkpoint is not None)
        try:
            self.plane.set_state(found.id, JobState.RUNNING, expect=resumable)
        except JobStateConflictError:  # another resume (or a node) changed it meanwhile
            raise not_resumable(found.id, self.plane.job(found.id).state, named_as(job)) from None
        note_periodic_resume(self.plane, self.store, found, ref)
        self.plane.record(
            found.id,
            "resuming",
            f"resuming from checkpoint {ref.checkpoint_id} on this machine (local, on-demand)",
            checkpoint=ref.checkpoint_id,
        )
        try:
            attempt = launch_node(self.plane, found, resume_from=ref.checkpoint_id, environ=every)
        except NodeStartError as exc:
            self.plane.set_state(found.id, found.state, expect=[JobState.RUNNING])
            self.plane.record(
                found.id,
                "resume-failed",
                f"{exc}; the job stays {found.state}",
                error=exc.to_dict(),
            )
            raise
        return Started(job=found, attempt=attempt, checkpoint=ref.checkpoint_id, said=said)

    def plan_resume(
        self,
        job: JobRef,
        *,
        checkpoint: str | None = None,
        use_earlier: bool = False,
        placement: Placement | None = None,
        workdir: str | os.PathLike[str] | None = None,
        checkpoint_every: str | None = None,
        confirm: Callable[[str], bool] | None = None,
    ) -> tuple[str, tuple[str, ...]]:
        """Where :meth:`resume` would continue the job, as ``portal resume --plan`` prints it,
        and what was said on the way (a kept checkpoint is stored first: that one change is
        made); the job is not resumed. Refuses what :meth:`resume` would refuse."""
        found, ref, said = self._resume_point(
            job, checkpoint, use_earlier, placement, workdir, checkpoint_every, confirm
        )
        placement = placement or Placement()
        if self.offers_installed:
            return self._offers.render(self._offers.plan_resume(found, ref, placement)), said
        lines = [
            f"D1 resume job {found.id}" + (" --no-spot" if placement.no_spot else ""),
            f"D2 state: {units.size(ref.size_bytes)}, its checkpoint as stored "
            f"({ref.checkpoint_id})",
            "D3 offers considered: this machine (local, on-demand); no cloud offers installed",
            "D8 would resume on this machine (local, on-demand: no notice to fit)",
        ]
        return "\n".join(lines), said

    def _resume_point(
        self,
        job: JobRef,
        checkpoint: str | None,
        use_earlier: bool,
        placement: Placement | None,
        workdir: str | os.PathLike[str] | None,
        checkpoint_every: str | None,
        confirm: Callable[[str], bool] | None,
    ) -> tuple[Job, CheckpointRef, tuple[str, ...]]:
        """The job, the checkpoint a resume continues it from, and what was said on the way;
        every refusal comes before anything changes (a kept checkpoint stored aside)."""
        placement = placement or Placement()
        named = named_as(job)
        found = self.job(job)
        if not self.offers_installed:
            refuse_offers_for_resume(placement, named)
        if workdir is not None and self.offers_installed:
            raise InvalidArgumentError(
                f"--workdir {os.fspath(workdir)}: a simulated machine runs the job in a directory "
                "of its own; --workdir is for a resume on this machine"
            )
        checkpoint_every_option(checkpoint_every)
        # A lost job (its machine gone without notice) resumes too, from its last complete
        # checkpoint: a periodic one, typically.
        if found.state not in resumable_states(found, named_checkpoint=checkpoint is not None):
            recorded = self.views.recorded_checkpoint(found)
            raise not_resumable(
                found.id, found.state, named, checkpointed=recorded is not None, job=found
            )
        said: list[str] = []
        stored = store_kept(self.plane, self.store, found)  # a paused attempt's unstored one
        if stored is not None:
            said.append(
                f"stored checkpoint {stored.checkpoint_id}, kept locally when its upload failed"
            )
        ref = resume_point(
            self.plane,
            self.store,
            found,
            checkpoint,
            named,
            use_earlier=use_earlier,
            confirm=confirm,
        )
        if found.state in ENDED:
            said.append(
                f"job {found.id} is {found.state}; resuming it from checkpoint "
                f"{ref.checkpoint_id}, as you asked"
            )
        return found, ref, tuple(said)

    def move(self, job: JobRef, *, placement: Placement | None = None) -> Moved:
        """Pause a running job on its machine (a notice of the default length) and resume it
        on the offer its plan chooses; returns once it runs there."""
        found = self._movable(job)
        return self._offers.move(found, placement or Placement())

    def plan_move(self, job: JobRef, *, placement: Placement | None = None) -> str:
        """Where :meth:`move` would take the job, as ``portal move --plan`` prints it."""
        found = self._movable(job)
        return self._offers.render(self._offers.plan_move(found, placement or Placement()))

    def _movable(self, job: JobRef) -> Job:
        found = self.job(job)
        named = named_as(job)
        if not self.offers_installed:
            raise local_only(f"portal move {named}", named, move=True)
        if found.state is not JobState.RUNNING:
            raise InvalidArgumentError(
                f"job {found.id} is {found.state}, not running: only a running job moves; a "
                f"suspended one resumes where you choose (`portal resume {named} --on SPEC`)",
                details={"job": found.id, "state": str(found.state)},
            )
        # A move asks for a suspend first: refused while the node is silent, in the rules' words.
        silence.refuse_while_silent(self.plane, found, f"moving job {found.id}")
        return found

    # --- acting on a running job ----------------------------------------------------------------

    def notice(self, job: JobRef, seconds: float | None = None) -> NoticeSent:
        """Deliver a preemption notice to the job's machine, as a cloud would: it pauses at a
        safe point, is checkpointed and suspended (``seconds``: the notice's length, default
        the setting ``notice_default_s``)."""
        found = self.job(job)
        if found.state not in ACTIVE:
            raise InvalidArgumentError(
                f"job {found.id} is {found.state}: a notice goes to a running job's machine"
            )
        # A notice asks for a suspend: refused while the node is silent, in the rules' words.
        silence.refuse_while_silent(self.plane, found, f"suspending job {found.id}")
        length = seconds if seconds is not None else self.settings.notice_default_s
        sent = deliver_notice(self.plane.paths(found.id).notices, seconds=length)
        return NoticeSent(job=found, notice_id=sent.id, seconds=length)

    def cancel(self, job: JobRef) -> Cancelled:
        """End a job for good: its node (and the script with it) is killed; its checkpoints
        are kept (a resume that names one continues it)."""
        found = self.job(job)
        if found.state.is_final:
            return Cancelled(job=found, already=True, kept=False)
        attempts = self.plane.store.attempts(found.id)
        if attempts and attempts[-1].state is AttemptState.RUNNING:
            pid_file = self.plane.paths(found.id).attempt(attempts[-1].number) / "node.pid"
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)  # its job dies with it
            self.plane.store.end_attempt(
                found.id,
                attempts[-1].number,
                state=AttemptState.FAILED,
                at=self.plane.clock.now(),
                exit_code=None,
            )
        ended = self.plane.set_state(found.id, JobState.CANCELLED)
        kept = self.views.recorded_checkpoint(found) is not None
        said = "its checkpoints are kept" if kept else "it had no checkpoint"
        self.plane.record(found.id, "cancelled", f"cancelled by the user; {said}")
        return Cancelled(job=ended, already=False, kept=kept)

    # --- reading --------------------------------------------------------------------------------

    def wait(
        self,
        job: JobRef,
        *,
        until: Collection[JobState | str] = ENDED_WAITING,
        timeout: float | None = None,
        poll_s: float = 0.1,
    ) -> Job:
        """The job once it is in one of ``until`` (default: anything but running or pausing),
        or as it is when ``timeout`` seconds have passed (its state says which)."""
        wanted = {JobState(s) for s in until}
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            found = self.job(job)
            if found.state in wanted or (end is not None and time.monotonic() >= end):
                return found
            time.sleep(poll_s)

    def status(self, job: JobRef) -> JobStatus:
        """The job's state, attempts, checkpoints and checkpoint check, typed; ``to_json()``
        gives the object ``portal status JOB --json`` prints (schema in docs/cli-json.md)."""
        return JobStatus.from_json(self.views.status(self.job(job)))

    def jobs(self) -> list[JobSummary]:
        """Every job, oldest first, other tools' too: the rows ``portal jobs --json`` prints
        (:meth:`JobSummary.to_json`)."""
        return [JobSummary.from_json(row) for row in self.views.jobs()]

    def explain(self, job: JobRef) -> Explanation:
        """Every notice the job got and what was decided at it, and the checkpoint check's and
        placement's decisions: ``portal explain --json`` (:meth:`Explanation.to_json`)."""
        return Explanation.from_json(self.views.explain(self.job(job)))

    def events(
        self, job: JobRef, *, after: int = 0, follow: bool = False, poll_s: float = 0.2
    ) -> Iterator[tuple[int, Event]]:
        """The job's log after sequence number ``after``, oldest first, each event with its
        number (pass the last one back to read only what came since); ``follow``: go on as
        events come, until the job has ended for good (done, failed or cancelled)."""
        found = job if isinstance(job, Job) else self.job(job)
        while True:
            ended = self.job(found.id).state.is_final if follow else True
            for seq, event in self.plane.store.events(found.id, after=after):
                after = seq
                yield seq, event
            if ended:
                return
            time.sleep(poll_s)

    def logs(
        self, job: JobRef, *, streams: Collection[str] = STREAMS, follow: bool = False
    ) -> Iterator[Output | Said]:
        """Every attempt's output (:class:`Output`: bytes of one stream), interleaved as it was
        written, with what a person following it is told in between (:class:`Said`): what
        ``portal logs`` prints. An attempt whose work a later one did again is left out or cut,
        so that it reads as one run. ``streams``: ``stdout``, ``stderr`` or both; ``follow``: go
        on while the job runs, into its next attempts, until it has ended for good."""
        unknown = sorted(set(streams) - set(STREAMS))
        if unknown or not streams:
            raise InvalidArgumentError(
                f"streams {sorted(streams)} name no output of a job: give stdout, stderr or both"
            )
        found = self.job(job)
        return job_output(
            self, found, streams=tuple(s for s in STREAMS if s in streams), follow=follow
        )

    def checkpoints(self, job: JobRef, *, verify: bool = False) -> list[CheckpointView]:
        """Each checkpoint of the job, oldest first, its state and why; ``verify`` reads every
        chunk of each in the store (slow) and marks what fails damaged."""
        found = self.job(job)
        return job_checkpoints(self.plane, self.store, found.id, verify=verify)
