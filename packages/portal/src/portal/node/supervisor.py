"""The node: supervises one attempt of a job on this machine.

It starts the job's process under the runtime, watches the notice sources, asks the runtime to
pause so that the last minute of a notice (or a fitting share of a short one) stays for saving
and uploading, streams the checkpoint to the store, reports every step as an event, and records
how the attempt ended. If the control plane cannot be reached it keeps going on its own: events
wait in a backlog and are reported once it answers again.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import queue
import re
import secrets
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import to_builtins

from portal.control import wording
from portal.control.api import MAX_EVENT_MESSAGE
from portal.control.backlog import BACKLOG_NAME, apply_entry
from portal.control.checkpoints import DAMAGE_CODES, DAMAGED_EVENT, KEPT, read_twice
from portal.control.liveness import write_node_pid
from portal.control.plane import ControlPlane
from portal.core.domain import AttemptState, JobState, Notice, NoticeKind
from portal.core.errors import PortalError
from portal.core.specs import AcknowledgesNotices
from portal.node.carry_check import CarryCheck, ProbeSchedule, outstanding_warnings
from portal.node.journal import Journal
from portal.node.machine import machine_facts, purchase_of
from portal.node.measure import child_pids
from portal.node.observer import load_observer
from portal.node.output_index import OutputIndex
from portal.node.periodic import PeriodicCheckpoints
from portal.node.runtime_link import RuntimeLink, control_socket_path
from portal.node.spool import store_file
from portal.node.stream import CheckpointStream, partial_files
from portal.node.watch import NoticeWatcher, open_sources
from portal.providers.local import NOTICE_DIR_ENV, withdraw_all
from portal.runtime.protocol import (
    EXIT_PAUSED,
    EXIT_REFUSED,
    RESTORED_ENV,
    SECRET_ENV,
    Abandoned,
    Checkpointed,
    Deferred,
    Failed,
    Hello,
    NotCheckpointed,
    Paused,
    ProbeReport,
    RuntimeEvent,
)

if TYPE_CHECKING:  # the store's modules load only when it is opened
    from portal.storage import CheckpointStore

__all__ = ["Node", "pause_deadline"]

log = logging.getLogger("portal.node")


class CheckpointDamagedError(PortalError):
    """The checkpoint a resume was to load failed its check; it is marked damaged."""

    code = "CHECKPOINT_DAMAGED"


_REFUSAL = re.compile(r"^portal: error \[(?P<code>[A-Z][A-Z0-9_]*)\]: (?P<message>.*)$")
SAVE_RESERVE_S = 60.0  # the spec: the last minute of the notice is kept for saving and uploading
HEARTBEAT_S = 5.0
#: How often the node reports upload progress to the control plane (a modest rate: the event log
#: keeps every one).
PROGRESS_EVERY_S = 1.0
#: The user's control-plane token (setting control_token): never in the job's environment.
TOKEN_ENV = "PORTAL_TOKEN"
#: The decrypted checkpoint a resume loads, in its attempt's folder (0600, deleted once loaded).
RESUME_IMAGE = "resume.portal"
#: How long one write to the control plane may wait before the node counts it unreachable and
#: keeps its reports in the journal (a notice must not wait on it).
CONTROL_TIMEOUT_S = 2.0
#: A job whose checkpoint check finds no pause point for this long is reported blocked (the
#: spec's 30 s); the environment variable sets it for tests.


def pause_deadline(notice: Notice, now: float) -> float:
    """When the program must have reached its safe point for this notice.

    The last minute is kept for saving and uploading; a notice of two minutes or less keeps half
    of what is left instead, so that a 30 s notice still leaves 15 s to find a safe point.
    """
    left = notice.remaining_s(now)
    reserve = min(SAVE_RESERVE_S, left / 2.0)
    return now + max(0.0, left - reserve)


def _remove_decrypted_images(job_root: Path) -> None:
    """Decrypted checkpoints an earlier attempt of this job left (its node killed with -9, its
    machine stopped): nothing decrypted may outlive the attempt that loaded it. One attempt of a
    job runs at a time, so none of these is being read."""
    for stale in job_root.glob(f"attempts/*/{RESUME_IMAGE}*"):
        with contextlib.suppress(OSError):
            stale.unlink()


def _die_with_parent() -> None:
    """In the child: be killed if the node dies (kill -9), so no job runs unsupervised."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Node:
    """One attempt of one job; :meth:`run` returns when the job's process has ended."""

    def __init__(
        self,
        plane: ControlPlane,
        job_id: str,
        attempt: int,
        *,
        resume_from: str | None = None,
        environ: Mapping[str, str] | None = None,
        store_factory: Callable[[], Any] | None = None,
        workdir: str | None = None,
    ) -> None:
        self.plane = plane
        self.clock = plane.clock
        self.job = plane.job(job_id)
        # Where this attempt's process runs: the job's directory, or a machine's own.
        self.workdir = workdir or self.job.workdir
        self.attempt = attempt
        self.resume_from = resume_from
        self.environ = dict(os.environ if environ is None else environ)
        self.paths = plane.paths(job_id)
        self.dir = self.paths.attempt(attempt)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.checkpoint_path = self.dir / "checkpoint.portal"
        #: Chosen by :meth:`run`: a folder that cannot be trusted is then the node's reported
        #: fault (the job ends), not a death before it could report anything.
        self.socket_path: Path
        self._store_factory = store_factory
        self._store: CheckpointStore | None = None
        self._journal = Journal(self.dir / BACKLOG_NAME, self._deliver)
        self._stream: CheckpointStream | None = None
        self._progress_at = 0.0
        self._notice: Notice | None = None
        # A pause asked for while the job's process was not listening yet (a resume still
        # restoring a large state): asked the moment it listens, until this deadline.
        self._pause_waiting: float | None = None
        self._problems_seen: set[str] = set()
        self._notes_seen: set[str] = set()  # the restore's notes, reported once per attempt
        self._resume_image: Path | None = None  # the decrypted checkpoint, until loaded
        #: Made by the runtime once a resume's restore is complete (protocol.RESTORED_ENV).
        self._restored_mark = self.dir / "restored"
        self._pause_over = False  # the runtime abandoned or failed the notice's pause
        self._impostor_told = False
        #: Notices whose handling failed: reported once, never taken again.
        self._unusable_notices: set[str] = set()
        #: What the notice sources said of notices they ignore (from their threads).
        self._source_said: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._sources: list[
            Any
        ] = []  # the notice sources watching this attempt's machine  # a peer on the socket that did not prove it is the runtime
        self._probe = ProbeSchedule.for_job(plane.settings, self.environ)
        self._machine = self._machine_name()
        self._purchase = purchase_model(self._machine, self.environ)
        self._probe.rehearse = self._probe.full and self._purchase == "on-demand"
        self._machine_notice_s: float | None = None  # what its notice source says, if any
        self._carry = CarryCheck(
            self._probe,
            clock=self.clock,
            machine=self._machine,
            purchase=self._purchase,
            warned=self._outstanding_warnings(),
            notice_s=self._notice_s,
            report=self.report,
        )
        self._periodic = PeriodicCheckpoints.for_job(
            plane.settings, self.environ, self._purchase, self.dir
        )
        # Whoever started this node and watches its measures (the simulated cloud's spot
        # watch moves a job that outgrows its machine's notice): see portal.node.observer.
        self._observer = load_observer(plane, job_id, self.environ)

    def _machine_name(self) -> str:
        with contextlib.suppress(Exception):
            return self.plane.store.attempts(self.job.id)[self.attempt - 1].machine
        return "local"

    def _outstanding_warnings(self) -> set[str]:
        with contextlib.suppress(Exception):
            events = (event for _, event in self.plane.store.events(self.job.id))
            return outstanding_warnings(events, self._machine)
        return set()

    def _notice_s(self) -> float | None:
        """This machine's notice, for the check's warning: None unless it is a spot machine;
        on one, the length its notice source states (GCP's 30 s, AWS's 120 s), else the
        configured default."""
        if self._purchase != "spot":
            return None
        return self._machine_notice_s or self.plane.settings.notice_default_s

    def _probe_report(self, event: ProbeReport) -> None:
        self._observer.checked(event.checked_bytes, partial=event.partial, pids=child_pids())
        self._carry.answered(event)

    # --- reporting ------------------------------------------------------------------------------

    def report(self, kind: str, message: str, /, **data: Any) -> None:
        """Record an event; if the control plane does not answer, keep it for later. A message
        longer than a control plane service keeps is cut there (``api.fit_message``): the whole
        is written here, to node.log."""
        if len(message) > MAX_EVENT_MESSAGE:
            log.info("event %s in full: %s", kind, message)
        self._add(
            {
                "op": "event",
                "id": uuid.uuid4().hex,  # a retry after a timeout is recorded once
                "at": self.clock.now(),
                "kind": kind,
                "message": message,
                "data": data,
            }
        )

    def _add(self, entry: dict[str, Any]) -> None:
        # Offline, a report only joins the journal: the heartbeat retries, the notice goes on.
        self._journal.add(entry, now=self.clock.now(), attempt=self._journal.offline_since is None)

    def _deliver(self, entry: dict[str, Any]) -> None:
        apply_entry(self.plane, self.job.id, entry)

    def _flush(self) -> bool:
        """Deliver the journal; once a backlog went through, say so. True when none is left."""
        since, kept = self._journal.offline_since, self._journal.kept_total
        if not self._journal.flush(now=self.clock.now()):
            return False
        if since is not None:
            self._journal.offline_since = None
            now = self.clock.now()
            self.report(
                "reported-late",
                wording.reported_late(since, now, kept),
                since=since,
                kept=kept,
            )
        return True

    def _set_state(self, state: JobState) -> None:
        self._add({"op": "state", "state": str(state)})

    # --- the store ------------------------------------------------------------------------------

    @property
    def store(self) -> CheckpointStore:
        """The jobs' checkpoint store: the one handed in (``store_factory``), else the one the
        settings name, opened on first use."""
        if self._store is None:
            if self._store_factory is not None:
                self._store = self._store_factory()
            else:
                from portal.storage import open_store

                self._store = open_store(self.plane.settings, self.plane.plugins)
        return self._store

    # --- the attempt ----------------------------------------------------------------------------

    def _learn_machine(self, sources: Sequence[Any]) -> None:
        """Ask the sources that detected this machine what it is (see :mod:`.machine`); its
        purchase model then decides the rehearsal and ``checkpoint_every = auto``, unless the
        node was told it (``PORTAL_NODE_PURCHASE``, a provisioned machine's record)."""
        facts = machine_facts(sources)
        if facts is None or not (facts.get("capacity") or facts.get("instance_type")):
            return  # a platform alone (the SIGTERM source) says nothing worth an event
        shown = {k: v for k, v in facts.items() if v}
        self.report("machine", wording.machine(shown), **shown)
        with contextlib.suppress(TypeError, ValueError):
            self._machine_notice_s = float(facts.get("notice_s") or 0) or None
        learned = purchase_of(facts)
        told = self.environ.get(PURCHASE_ENV, "").strip() or self._machine != "local"
        if learned is None or told or learned == self._purchase:
            return
        self._purchase = learned
        self._carry.purchase = learned
        self._probe.rehearse = self._probe.full and learned == "on-demand"
        self._periodic = PeriodicCheckpoints.for_job(
            self.plane.settings, self.environ, learned, self.dir
        )

    def _command(self) -> list[str]:
        base = [sys.executable, "-m", "portal.runtime"]
        control = ["--control", str(self.socket_path), "--checkpoint", str(self.checkpoint_path)]
        if self._probe.rehearse:
            control.append("--probe-rehearsal")  # capture_probe = full on an on-demand machine
        if self.resume_from is None:
            if self.job.nproc_per_node:  # Portal launches the ranks (a resume finds them)
                control += ["--nproc-per-node", str(self.job.nproc_per_node)]
            return [*base, "run", *control, self.job.script, *self.job.args]
        return [*base, "resume", *control, str(self._download(self.resume_from))]

    def _verified_reader(self, checkpoint_id: str) -> Any:
        """A reader of the checkpoint whose every chunk checked out (read twice before a
        failed check counts: :func:`portal.control.checkpoints.read_twice`)."""

        def verified() -> Any:
            reader = self.store.open_reader(self.job.id, checkpoint_id)
            reader.verify()
            return reader

        return read_twice(verified)

    def _download(self, checkpoint_id: str) -> Path:
        """Fetch and verify the checkpoint before anything reads it (a checkpoint is code).

        The decrypted image is this user's alone (0600) and lives only until the runtime has
        loaded it (its greeting) or the attempt ends: no plaintext state stays behind."""
        target = self.dir / RESUME_IMAGE
        started = time.monotonic()
        try:
            reader = self._verified_reader(checkpoint_id)
        except PortalError as exc:
            if exc.code not in DAMAGE_CODES:
                raise
            # Remembered, so that no resume takes it again and every listing names it.
            self.report(
                DAMAGED_EVENT,
                f"checkpoint {checkpoint_id} is damaged and will not be resumed: {exc}",
                checkpoint=checkpoint_id,
                reason=str(exc),
            )
            raise CheckpointDamagedError(
                f"checkpoint {checkpoint_id} is damaged ({exc}); nothing of it was loaded, and "
                f"the job stays suspended. `portal resume {self.job.name or self.job.id}` says "
                "which earlier checkpoint is intact and resumes from it when you agree",
                details={"checkpoint": checkpoint_id, "reason": str(exc)},
            ) from exc
        tmp = target.with_suffix(".part")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with open(fd, "wb") as out:
                for piece in reader.iter_chunks():
                    out.write(piece)
            tmp.replace(target)
        except BaseException:
            tmp.unlink(missing_ok=True)  # no part of a decrypted image outlives its download
            raise
        self._resume_image = target
        summary = reader.manifest.summary
        origin: dict[str, Any] = {}
        if summary.get("periodic") and summary.get("stdout_bytes") is not None:
            # The periodic checkpoint's own record of where its attempt's output stood (see
            # portal.control.lineage): told here in case its attempt never reported it.
            origin = {
                "origin_attempt": summary.get("attempt"),
                "stdout_bytes": summary.get("stdout_bytes"),
                "stderr_bytes": summary.get("stderr_bytes"),
            }
        self.report(
            "restoring",
            wording.restoring(checkpoint_id, target.stat().st_size, time.monotonic() - started),
            checkpoint=checkpoint_id,
            **origin,
        )
        return target

    def _source_settings(self) -> dict[str, Any]:
        """Every plugin's settings as the node's settings stack resolves them (config.toml,
        portal.toml, variables), for the notice sources. A value refused is told (event
        ``settings-refused``) and the sources go on with their own defaults: a typo in a
        provider's setting never leaves a job unwatched."""
        try:
            values = dict(self.plane.settings.with_plugins(self.plane.plugins).values)
        except PortalError as why:
            self.report("settings-refused", wording.settings_refused(str(why)), error=str(why))
            values = {}
        values["local_notice_dir"] = str(self.paths.notices)
        return values

    def run(self) -> int:
        """Run the attempt to its end; returns the job process's exit status."""
        write_node_pid(self.dir / "node.pid")
        _remove_decrypted_images(self.paths.root)
        self.socket_path = control_socket_path(self.job.id, self.attempt)
        env = dict(self.environ)
        # The user's token is the node's, to report; the job's program gets none (it would
        # act as the user on every job, and its checkpoints would carry it in their env).
        env.pop(TOKEN_ENV, None)
        env[NOTICE_DIR_ENV] = str(self.paths.notices)
        secret = secrets.token_hex(16)  # the runtime's greeting proves it is the one started here
        env[SECRET_ENV] = secret
        self._restored_mark.unlink(missing_ok=True)
        if self.resume_from is not None:  # the runtime says here when its restore is complete
            env[RESTORED_ENV] = str(self._restored_mark)
        sources = open_sources(
            self.plane.plugins,
            clock=self.clock,
            environ=env,
            settings=self._source_settings(),
            report=self._source_said.put,  # reported by the supervising loop, in order
        )
        watcher = NoticeWatcher(sources).start()
        self._sources = sources
        self.report("watching", wording.watching(watcher.names), sources=watcher.names)
        self._learn_machine(sources)
        if self._probe.full and not self._probe.rehearse:
            self.report(
                "carry-no-rehearsal",
                wording.no_rehearsal(self._purchase),
                machine=self._machine,
                purchase=self._purchase,
            )
        stdout = self.paths.stdout(self.attempt).open("ab")
        stderr = self.paths.stderr(self.attempt).open("ab")
        self._output = OutputIndex(
            self.paths.output_index(self.attempt), stdout, stderr, now=self.clock.now
        ).start()
        link = RuntimeLink(self.socket_path, secret)
        try:
            command = self._command()
            process = subprocess.Popen(
                command,
                cwd=self.workdir,
                stdout=stdout,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                env=env,
                preexec_fn=_die_with_parent,
            )
            self.report(
                "started",
                wording.started(self.attempt, process.pid),
                pid=process.pid,
                workdir=self.workdir,
            )
            self._periodic.started(self.clock.monotonic())
            if self._periodic.every_s is not None:
                log.info("periodic checkpoints every %g s", self._periodic.every_s)
            code = self._supervise(process, watcher, link)
        except BaseException:
            watcher.close()
            raise
        finally:
            link.close()
            watcher.stop()
            self._output.close()
            stdout.close()
            stderr.close()
        try:
            return self._finish(code)
        finally:  # open until the end: a stored checkpoint is acknowledged through its source
            watcher.close()

    def _supervise(
        self, process: subprocess.Popen[bytes], watcher: NoticeWatcher, link: RuntimeLink
    ) -> int:
        last_beat = 0.0
        while True:
            code = process.poll()
            if code is not None:
                for event in link.events():
                    self._runtime_event(event)
                return code
            for notice in watcher.get(timeout_s=0.05):
                self._take_notice(notice, link)
            while not self._source_said.empty():
                self.report("notice-unusable", self._source_said.get_nowait())
            link.try_connect()
            if self._pause_waiting is not None:
                self._ask_waiting_pause(link)
            for event in link.events():
                self._runtime_event(event)
            if link.refused is not None and not self._impostor_told:
                self._impostor_told = True
                self.report("runtime-refused", link.refused, socket=str(link.path))
            self._carry.tick(link, pause_wanted=self._notice is not None)
            self._check_periodic(link)
            self._report_progress(self._stream)
            now = self.clock.monotonic()
            if now - last_beat >= HEARTBEAT_S:
                last_beat = now
                if self._flush():
                    self._add({"op": "heard", "at": self.clock.now()})

    def _take_notice(self, notice: Notice, link: RuntimeLink) -> None:
        """Act on a notice; one the node cannot act on is reported and dropped. No notice may
        end the node, and the job with it (a deadline of ``inf`` once did, at every resume)."""
        if notice.id in self._unusable_notices:
            return
        try:
            self._on_notice(notice, link)
        except Exception as exc:
            self._unusable_notices.add(notice.id)
            log.exception("notice %s could not be acted on", notice.id)
            self.report(
                "notice-unusable",
                wording.notice_unusable(notice.id, notice.provider, exc),
                notice=notice.id,
            )

    def _on_notice(self, notice: Notice, link: RuntimeLink) -> None:
        now = self.clock.now()
        if notice.cancelled:
            if self._notice is not None and notice.id == self._notice.id:
                self._notice = None
                self._pause_waiting = None
                link.cancel()
                self._stop_stream()
                self._set_state(JobState.RUNNING)
                self.report("notice-withdrawn", wording.notice_withdrawn(notice), notice=notice.id)
            return
        if notice.kind is NoticeKind.REBALANCE:
            self.report("rebalance", wording.rebalance(notice, now), notice=notice.id)
            return
        if self._notice is not None and notice.deadline >= self._notice.deadline:
            return  # already pausing for an earlier deadline
        self._notice = notice
        self._pause_over = False
        self._periodic.discard()  # the notice's checkpoint goes first, with the whole uplink
        self._probe.asked_at = None  # the pause wins; a check is asked again if it is withdrawn
        deadline = pause_deadline(notice, now)
        # Ask at once when the runtime listens: nothing waits on the control plane first.
        asked = link.connected and link.request_pause(deadline)
        if asked:
            self._start_stream()
        self.report(
            "notice",
            wording.notice(notice, now),
            notice=notice.id,
            provider=notice.provider,
            kind=str(notice.kind),
            deadline=notice.deadline,
            source=notice.source,
            notice_s=notice.notice_s,
        )
        self._set_state(JobState.PAUSING)
        if asked:
            self.report("pausing", wording.pausing(deadline, notice.deadline), deadline=deadline)
        elif not link.connected:
            # The process is still starting (a resume restoring a large state): the supervising
            # loop asks the moment it listens, without blocking notices and reports meanwhile.
            self._pause_waiting = deadline
            self.report("pause-waiting", wording.pause_waiting(deadline), deadline=deadline)
        else:
            self.report("pause-unreachable", wording.pause_unreachable())

    def _ask_waiting_pause(self, link: RuntimeLink) -> None:
        """The pause a notice asked for while the process was starting, once it listens."""
        deadline = self._pause_waiting
        assert deadline is not None and self._notice is not None
        if link.connected:
            self._pause_waiting = None
            if link.request_pause(deadline):
                self._start_stream()
                self.report(
                    "pausing", wording.pausing(deadline, self._notice.deadline), deadline=deadline
                )
            else:
                self.report("pause-unreachable", wording.pause_unreachable())
        elif self.clock.now() > deadline:
            self._pause_waiting = None
            self.report("pause-unreachable", wording.pause_unreachable())

    # --- periodic checkpoints -------------------------------------------------------------------

    def _check_periodic(self, link: RuntimeLink) -> None:
        """Ask for a periodic checkpoint when one is due (never during a notice, never two at
        once), and report the one uploading once it is stored."""
        periodic = self._periodic
        if not periodic.enabled:
            return
        self._periodic_stored()
        if self._notice is not None or not link.connected:
            return
        if not periodic.due(self.clock.monotonic()):
            return
        if periodic.busy:
            what = "uploaded" if periodic.upload is not None else "taken"
            log.info("periodic checkpoint skipped: the previous one is still being %s", what)
            return
        path = periodic.next_path()
        if link.request_checkpoint(path, self.clock.now() + (periodic.every_s or 0.0)):
            periodic.asked = path

    def _periodic_taken(self, event: Checkpointed) -> None:
        """The runtime wrote it and runs on: upload it (chunks already stored are reused).

        Only the file the node asked for is ever uploaded or deleted: a peer on the socket that
        names another path (a file of its choosing, to be resumed as this job) is ignored."""
        periodic = self._periodic
        asked, periodic.asked = periodic.asked, None
        if asked is None or Path(event.checkpoint) != asked:
            log.warning(
                "the runtime reported a checkpoint at %s, which the node did not ask for "
                "(it asked for %s): ignored",
                event.checkpoint,
                asked or "none",
            )
            return
        if self._notice is not None:  # a notice came meanwhile: its checkpoint goes first
            asked.unlink(missing_ok=True)
            return
        if self._probe.waiting:  # a checkpoint that was written whole answers a check
            self._probe.answered(self.clock.monotonic())
        periodic.taken = event
        periodic.upload = CheckpointStream(
            self.store,
            self.job.id,
            Path(event.checkpoint),
            deadline=None,
            # Where the job's output stood when it paused: kept with the checkpoint, so that a
            # later attempt resumed from it leaves out what it does again even when this node
            # never got to report it (the machine vanished first).
            summary={
                "attempt": self.attempt,
                "periodic": True,
                "where": event.where,
                "stdout_bytes": event.stdout_bytes,
                "stderr_bytes": event.stderr_bytes,
            },
        ).start()
        periodic.upload.producer_exited()  # the file is whole already

    def _periodic_stored(self) -> None:
        periodic = self._periodic
        upload, taken = periodic.upload, periodic.taken
        if upload is None or taken is None or not upload.done():
            return
        periodic.upload = periodic.taken = None
        periodic.failed_why = None
        Path(taken.checkpoint).unlink(missing_ok=True)
        try:
            ref = upload.result()
        except Exception as exc:
            self.report(
                "checkpoint-periodic-failed",
                wording.periodic_failed(
                    f"uploading it failed: {type(exc).__name__}: {exc}", periodic.every_s or 0.0
                ),
                error=f"{type(exc).__name__}: {exc}",
            )
            return
        seconds = time.monotonic() - (upload.started_at or time.monotonic())
        self.report(
            "checkpoint-periodic",
            wording.periodic_saved(
                ref.checkpoint_id, taken.bytes, taken.stall_seconds, taken.where
            ),
            checkpoint=ref.checkpoint_id,
            bytes=taken.bytes,
            stored_bytes=ref.size_bytes,
            stall_seconds=taken.stall_seconds,
            where=taken.where,
            upload_seconds=seconds,
            attempt=self.attempt,
            stdout_bytes=taken.stdout_bytes,
            stderr_bytes=taken.stderr_bytes,
        )

    def _periodic_not_taken(self, event: NotCheckpointed) -> None:
        self._periodic.asked = None
        log.info("periodic checkpoint not taken: %s %s", event.reason, event.error)
        if event.reason == "problems":
            # What stands in the way is what a notice's checkpoint would meet: warn as a check.
            self._probe_report(ProbeReport(problems=event.problems))
        if event.reason in ("problems", "error") and self._notice is None:
            why = event.error or "; ".join(
                f"{p.name} ({p.type_name}): {p.reason}" for p in event.problems
            )
            if why == self._periodic.failed_why:
                return  # said once; said again only when the reason changes
            self._periodic.failed_why = why
            self.report(
                "checkpoint-periodic-failed",
                wording.periodic_failed(why, self._periodic.every_s or 0.0),
                reason=event.reason,
            )

    def _drop_resume_image(self) -> None:
        """Delete the decrypted checkpoint: the runtime has loaded it (its greeting comes after
        the restore), or the attempt is over. It was kept for the whole of a resumed attempt
        (until its end) while the restore's mark stood, and for ever after a kill -9."""
        if self._resume_image is not None:
            self._resume_image.unlink(missing_ok=True)
            self._resume_image = None

    def _runtime_event(self, event: RuntimeEvent) -> None:
        if isinstance(event, Hello):
            self._drop_resume_image()  # loaded: the runtime greets only once it has restored
            for text in event.notes:  # what the restore did otherwise (GPU tensors onto the CPU)
                if text not in self._notes_seen:
                    self._notes_seen.add(text)
                    self.report("restore-note", wording.restore_note(text), note=text)
        elif isinstance(event, Checkpointed):
            self._periodic_taken(event)
        elif isinstance(event, NotCheckpointed):
            self._periodic_not_taken(event)
        elif isinstance(event, ProbeReport):
            self._probe_report(event)
        elif isinstance(event, Deferred) and self._notice is None and self._probe.waiting:
            self._probe.reasons = list(event.problems)  # why the check finds no pause point
        elif isinstance(event, Deferred):
            for problem in event.problems:
                key = f"{problem.name}|{problem.reason}"
                if key not in self._problems_seen:
                    self._problems_seen.add(key)
                    self.report("deferred", wording.deferred(problem), problem=to_builtins(problem))
        elif isinstance(event, Abandoned):
            self._pause_over = True
            self._stop_stream()
            self._set_state(JobState.RUNNING)
            self.report("pause-abandoned", wording.abandoned(event.reason), reason=event.reason)
            self._observer.not_suspended(f"the pause was abandoned ({event.reason})")
        elif isinstance(event, Failed):
            self._pause_over = True
            self._stop_stream(discard=True)  # its bytes are no checkpoint: nothing to keep
            self._set_state(JobState.RUNNING)
            previous = self._latest_complete()
            self.report(
                "pause-failed", wording.pause_failed(event.error, previous), checkpoint=previous
            )
            self._observer.not_suspended(f"the pause failed ({event.error})")
        elif isinstance(event, Paused):
            self.report(
                "paused",
                wording.paused(event.paused_at, event.bytes),
                where=event.paused_at,
                bytes=event.bytes,
                seconds_to_safe_point=event.seconds_to_safe_point,
            )

    def _latest_complete(self) -> str | None:
        """The job's last complete checkpoint's id (None: none, or the store cannot say)."""
        with contextlib.suppress(Exception):
            latest = self.store.latest_complete(self.job.id)
            return latest.checkpoint_id if latest is not None else None
        return None

    def _writing(self) -> str | None:
        """What Portal was writing or loading in the job's process, if anything: a death then
        is not the script's failure (see :meth:`_finish`)."""
        if self._notice is not None and not self._pause_over:
            return "its pause (the checkpoint being written)"
        if self._periodic.asked is not None:
            return "a periodic checkpoint"
        if self._resume_image is not None and not self._restored_mark.exists():
            # Restored (the runtime's mark) but not greeted yet: the program's own line failed,
            # however soon after the resume.
            return "its restore from the checkpoint"
        return None

    def _finish(self, code: int) -> int:
        now = self.clock.now()
        during = self._writing() if code not in (0, EXIT_PAUSED, EXIT_REFUSED) else None
        self._restored_mark.unlink(missing_ok=True)
        self._drop_resume_image()
        self._periodic.discard()  # the attempt is over: its own end decides what is kept
        for partial in partial_files(self.checkpoint_path):  # a writer killed mid-file
            partial.unlink(missing_ok=True)
        # The machine this attempt's notices were for is gone with it: the next attempt must
        # not take them as its own, including one that came too late to be taken.
        taken = self._notice.id if self._notice is not None else None
        for notice_id in withdraw_all(self.paths.notices):
            if notice_id != taken:
                self.report(
                    "notice-dropped",
                    f"notice {notice_id} came as attempt {self.attempt} ended, before it was "
                    "taken; it was for that attempt's machine, so no later attempt receives it",
                    notice=notice_id,
                )
        if code != EXIT_PAUSED:
            self._stop_stream()  # the process ended without a whole checkpoint: nothing comes
            self._observer.not_suspended(f"the job ended first (exit status {code})")
        if code == EXIT_PAUSED and (self._stream is not None or self.checkpoint_path.exists()):
            try:
                ref = self._stored_checkpoint()
            except Exception as exc:
                # The process is gone; its last complete checkpoint, if any, still holds.
                # The file is whole (renamed only once written): the job's state lives on in
                # it, stored by the next resume (portal.node.spool).
                previous = self._latest_complete()
                kept = self.checkpoint_path.is_file()
                self.report(
                    "upload-failed",
                    wording.upload_failed(exc, self.checkpoint_path, self.job, previous, kept=kept),
                    checkpoint=previous,
                    attempt=self.attempt,
                    **({KEPT: str(self.checkpoint_path)} if kept else {}),
                )
                self._observer.not_suspended("its checkpoint could not be stored")
                job_state = JobState.SUSPENDED if previous or kept else JobState.FAILED
                self._end(AttemptState.FAILED, job_state, code, now)
                return code
            self.checkpoint_path.unlink(missing_ok=True)
            stored_at = self.clock.now()
            if self._notice is not None and stored_at > self._notice.deadline:
                self.report(
                    "overrun",
                    wording.overrun(
                        ref.checkpoint_id,
                        stored_at - self._notice.deadline,
                        self._notice.deadline,
                        ref.size_bytes,
                    ),
                    checkpoint=ref.checkpoint_id,
                    late_s=stored_at - self._notice.deadline,
                )
            self.report(
                "suspended",
                wording.suspended(self.job, ref.checkpoint_id, ref.size_bytes),
                checkpoint=ref.checkpoint_id,
                bytes=ref.size_bytes,
                attempt=self.attempt,
            )
            self._end(AttemptState.SUSPENDED, JobState.SUSPENDED, code, now)
            self._acknowledge(ref.checkpoint_id)
            self._observer.suspended(ref.checkpoint_id)
        elif code == 0:
            self.report("done", wording.done(self.job), exit_code=0)
            self._end(AttemptState.EXITED, JobState.DONE, code, now)
        elif (refusal := self._runtime_refusal(code)) is not None:
            error, message = refusal
            self.report(
                "portal-error",
                wording.portal_error(error, message),
                code=error,
                attempt=self.attempt,
                exit_code=code,
            )
            self._end(AttemptState.FAILED, JobState.FAILED, code, now)
        elif during is not None and (last := self._last_complete()) is not None:
            self.checkpoint_path.unlink(missing_ok=True)
            self.report(
                "suspended",
                wording.died_while_writing(self.job, code, during, last.checkpoint_id),
                checkpoint=last.checkpoint_id,
                bytes=last.size_bytes,
                attempt=self.attempt,
                exit_code=code,
                died_during=during,
            )
            self._end(AttemptState.FAILED, JobState.SUSPENDED, code, now)
        else:
            self.report("failed", wording.failed(self.job, code), exit_code=code)
            self._end(AttemptState.FAILED, JobState.FAILED, code, now)
        return code

    def _last_complete(self) -> Any:
        try:
            return self.store.latest_complete(self.job.id)
        except Exception:  # the store unreachable: the job is failed, as before
            return None

    def _acknowledge(self, checkpoint_id: str) -> None:
        """Tell the notice's platform the job is saved, where its source can (Azure: the
        scheduled event may start now rather than at its NotBefore). Never fatal."""
        notice = self._notice
        if notice is None:
            return
        source = next((s for s in self._sources if s.name == notice.source), None)
        if not isinstance(source, AcknowledgesNotices):
            return
        try:
            source.acknowledge(notice)
        except Exception as exc:
            self.report(
                "acknowledge-failed",
                wording.acknowledge_failed(notice.provider, exc),
                notice=notice.id,
                error=f"{type(exc).__name__}: {exc}",
            )
            return
        self.report(
            "acknowledged",
            wording.acknowledged(notice.provider, checkpoint_id),
            notice=notice.id,
            checkpoint=checkpoint_id,
        )

    def _runtime_refusal(self, code: int) -> tuple[str, str] | None:
        """``(error code, message)`` when the runtime refused to run or resume the script (its
        exit status 65 and its last line ``portal: error [CODE]: ...`` on stderr): a Portal
        error, never to be taken for the script's own failure."""
        if code != EXIT_REFUSED:
            return None
        try:
            with self.paths.stderr(self.attempt).open("rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - 8192))
                tail = f.read().decode("utf-8", "replace")
        except OSError:
            return None
        lines = tail.rstrip("\n").splitlines()
        found = _REFUSAL.match(lines[-1]) if lines else None
        return None if found is None else (found["code"], found["message"])

    def abort(self, exc: BaseException) -> None:
        """End the attempt after a fault of the node itself (the job keeps its checkpoints)."""
        has_checkpoint = False
        with contextlib.suppress(Exception):
            has_checkpoint = self.store.latest_complete(self.job.id) is not None
        state = JobState.SUSPENDED if has_checkpoint else JobState.FAILED
        self._end(AttemptState.FAILED, state, None, self.clock.now())

    def _end(self, attempt: AttemptState, job: JobState, code: int | None, now: float) -> None:
        """Record how the attempt ended; the node stays until the control plane has it all
        (killed meanwhile, it leaves its journal for the next reader of the job)."""
        self._add(
            {
                "op": "end",
                "attempt": self.attempt,
                "state": str(attempt),
                "at": now,
                "exit_code": code,
                "job_state": str(job),
            }
        )
        wait = 0.5
        while not self._flush():
            log.warning("control plane unreachable; %d report(s) kept", self._journal.pending)
            time.sleep(wait)
            wait = min(HEARTBEAT_S, wait * 2)

    # --- the checkpoint's upload --------------------------------------------------------------

    def _start_stream(self) -> None:
        """Be ready to upload the checkpoint from its first byte (see :mod:`portal.node.stream`)."""
        if self._stream is not None:
            return
        self._stream = CheckpointStream(
            self.store,
            self.job.id,
            self.checkpoint_path,
            deadline=self._notice.deadline if self._notice is not None else None,
            summary={"attempt": self.attempt},
        ).start()

    def _stop_stream(self, *, discard: bool = False) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.cancel(discard=discard)

    def _report_progress(self, stream: CheckpointStream | None) -> None:
        """Upload progress for the control plane (and so for an attached ``portal run``), at
        most once a second; not while offline (the journal keeps what matters, not this)."""
        if stream is None or self._journal.offline_since is not None:
            return
        progress = stream.progress
        now = self.clock.monotonic()
        if progress is None or now - self._progress_at < PROGRESS_EVERY_S:
            return
        self._progress_at = now
        self.report(
            "upload-progress",
            wording.upload_progress(progress),
            bytes_done=progress.bytes_done,
            expected_bytes=progress.expected_bytes,
            rate_bps=progress.rate_bps,
            eta_s=progress.eta_s,
            will_miss_deadline=progress.will_miss_deadline,
        )

    def _stored_checkpoint(self) -> Any:
        """The checkpoint in the store: streamed while it was written, or (no stream, or one
        that broke) uploaded from the finished file."""
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.producer_exited()
            while not stream.done():
                self._report_progress(stream)
                time.sleep(0.05)
            try:
                ref = stream.result()
            except Exception as exc:
                if not self.checkpoint_path.exists():
                    raise
                log.warning("streaming the checkpoint failed (%s); uploading the file", exc)
                stream.cancel(discard=True)  # its parts: room the upload of the file needs
            else:
                seconds = time.monotonic() - (stream.started_at or time.monotonic())
                self.report(
                    "uploaded",
                    wording.uploaded(ref.size_bytes, seconds, streamed=True),
                    checkpoint=ref.checkpoint_id,
                    seconds=seconds,
                    streamed=True,
                )
                return ref
        return self._upload()

    def _upload(self) -> Any:
        deadline = self._notice.deadline if self._notice is not None else None
        started = time.monotonic()
        ref = store_file(
            self.store, self.job.id, self.checkpoint_path, attempt=self.attempt, deadline=deadline
        )
        seconds = time.monotonic() - started
        self.report(
            "uploaded",
            wording.uploaded(ref.size_bytes, seconds),
            checkpoint=ref.checkpoint_id,
            seconds=seconds,
            streamed=False,
        )
        return ref


#: What the node was told of its machine's purchase model, by whoever started it (a provisioner):
#: ``on-demand`` or ``spot``. Unset: taken from the machine the attempt records, else unknown.
PURCHASE_ENV = "PORTAL_NODE_PURCHASE"
PURCHASE_MODELS = ("on-demand", "spot", "unknown")


def purchase_model(machine: str, environ: Mapping[str, str]) -> str:
    """``on-demand``, ``spot`` or ``unknown``: whether a checkpoint rehearsal may run here.

    This machine (``local``) is the user's own, on-demand. A provisioned machine is recorded as
    its offer (``sim-0002 spot aws c7i.large (us-east-1)``), which says ``spot`` or
    ``on-demand``; anything else is unknown, and a rehearsal does not run on it.
    """
    told = environ.get(PURCHASE_ENV, "").strip().lower()
    if told in ("on-demand", "spot"):
        return told
    if machine == "local":
        return "on-demand"
    words = machine.split()
    for model in ("spot", "on-demand"):
        if model in words:
            return model
    return "unknown"
