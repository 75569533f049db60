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
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from msgspec import to_builtins

from portal.control import wording
from portal.control.carry import problem_key
from portal.control.liveness import write_node_pid
from portal.control.plane import ControlPlane
from portal.core.builtin.local_notices import NOTICE_DIR_ENV, withdraw_notice
from portal.core.domain import AttemptState, JobState, Notice, NoticeKind
from portal.core.settings import Settings
from portal.core.wire import (
    Abandoned,
    Deferred,
    Failed,
    Paused,
    ProbeReport,
    ProblemRecord,
    RuntimeEvent,
)
from portal.node.runtime_link import RuntimeLink, control_socket_path
from portal.node.watch import NoticeWatcher, open_sources

__all__ = ["EXIT_PAUSED", "Node", "pause_deadline"]

log = logging.getLogger("portal.node")

EXIT_PAUSED = 75
SAVE_RESERVE_S = 60.0  # the spec: the last minute of the notice is kept for saving and uploading
HEARTBEAT_S = 5.0
#: A job whose checkpoint check finds no pause point for this long is reported blocked (the
#: spec's 30 s); the environment variable sets it for tests.
BLOCKED_AFTER_ENV = "PORTAL_CAPTURE_BLOCKED_AFTER_S"
BLOCKED_AFTER_S = 30.0


def pause_deadline(notice: Notice, now: float) -> float:
    """When the program must have reached its safe point for this notice.

    The last minute is kept for saving and uploading; a notice of two minutes or less keeps half
    of what is left instead, so that a 30 s notice still leaves 15 s to find a safe point.
    """
    left = notice.remaining_s(now)
    reserve = min(SAVE_RESERVE_S, left / 2.0)
    return now + max(0.0, left - reserve)


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
    ) -> None:
        self.plane = plane
        self.clock = plane.clock
        self.job = plane.job(job_id)
        self.attempt = attempt
        self.resume_from = resume_from
        self.environ = dict(os.environ if environ is None else environ)
        self.paths = plane.paths(job_id)
        self.dir = self.paths.attempt(attempt)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.checkpoint_path = self.dir / "checkpoint.portal"
        self.socket_path = control_socket_path(job_id, attempt)
        self._store_factory = store_factory
        self._store: Any = None
        self._backlog: list[tuple[str, str, dict[str, Any]]] = []
        self._notice: Notice | None = None
        self._problems_seen: set[str] = set()
        self._probe = _ProbeSchedule.for_job(plane.settings, self.environ)
        self._machine = self._machine_name()
        self._warned = self._outstanding_warnings()

    def _machine_name(self) -> str:
        with contextlib.suppress(Exception):
            return self.plane.store.attempts(self.job.id)[self.attempt - 1].machine
        return "local"

    def _outstanding_warnings(self) -> set[str]:
        """Problems already warned about on this machine and not cleared since (one warning per
        machine and problem, across the job's attempts here)."""
        warned: set[str] = set()
        with contextlib.suppress(Exception):
            for _, event in self.plane.store.events(self.job.id):
                if event.data.get("machine") != self._machine:
                    continue
                if event.kind == "carry-warning":
                    warned.add(problem_key(dict(event.data.get("problem", {}))))
                elif event.kind == "carry-ok":
                    warned.clear()
        return warned

    # --- reporting ------------------------------------------------------------------------------

    def report(self, kind: str, message: str, /, **data: Any) -> None:
        """Record an event; if the control plane does not answer, keep it for later."""
        self._backlog.append((kind, message, data))
        self._flush()

    def _flush(self) -> None:
        while self._backlog:
            kind, message, data = self._backlog[0]
            try:
                self.plane.record(self.job.id, kind, message, data)
            except Exception as exc:
                log.warning(
                    "control plane unreachable, %d events kept: %s", len(self._backlog), exc
                )
                return
            self._backlog.pop(0)

    def _set_state(self, state: JobState) -> None:
        try:
            self.plane.set_state(self.job.id, state)
        except Exception as exc:
            log.warning("control plane unreachable, state %s not recorded yet: %s", state, exc)

    # --- the store ------------------------------------------------------------------------------

    @property
    def store(self) -> Any:
        if self._store is None:
            if self._store_factory is not None:
                self._store = self._store_factory()
            else:
                from portal.storage import CheckpointStore, resolve_key_store

                self._store = CheckpointStore(
                    self.plane.settings.storage_url, resolve_key_store(str(self.plane.home))
                )
        return self._store

    # --- the attempt ----------------------------------------------------------------------------

    def _command(self) -> list[str]:
        base = [sys.executable, "-m", "portal.runtime"]
        control = ["--control", str(self.socket_path), "--checkpoint", str(self.checkpoint_path)]
        if self.resume_from is None:
            return [*base, "run", *control, self.job.script, *self.job.args]
        return [*base, "resume", *control, str(self._download(self.resume_from))]

    def _download(self, checkpoint_id: str) -> Path:
        """Fetch and verify the checkpoint before anything reads it (a checkpoint is code)."""
        target = self.dir / "resume.portal"
        started = time.monotonic()
        reader = self.store.open_reader(self.job.id, checkpoint_id)
        reader.verify()
        tmp = target.with_suffix(".part")
        with tmp.open("wb") as out:
            for piece in reader.iter_chunks():
                out.write(piece)
        tmp.replace(target)
        self.report(
            "restoring",
            wording.restoring(checkpoint_id, target.stat().st_size, time.monotonic() - started),
            checkpoint=checkpoint_id,
        )
        return target

    def run(self) -> int:
        """Run the attempt to its end; returns the job process's exit status."""
        write_node_pid(self.dir / "node.pid")
        env = dict(self.environ)
        env[NOTICE_DIR_ENV] = str(self.paths.notices)
        sources = open_sources(
            self.plane.plugins,
            clock=self.clock,
            environ=env,
            settings={"local_notice_dir": str(self.paths.notices)},
        )
        watcher = NoticeWatcher(sources).start()
        self.report("watching", wording.watching(watcher.names), sources=watcher.names)
        stdout = self.paths.stdout(self.attempt).open("ab")
        stderr = self.paths.stderr(self.attempt).open("ab")
        link = RuntimeLink(self.socket_path)
        try:
            command = self._command()
            process = subprocess.Popen(
                command,
                cwd=self.job.workdir,
                stdout=stdout,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                env=env,
                preexec_fn=_die_with_parent,
            )
            self.report("started", wording.started(self.attempt, process.pid), pid=process.pid)
            code = self._supervise(process, watcher, link)
        finally:
            link.close()
            watcher.close()
            stdout.close()
            stderr.close()
        return self._finish(code)

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
                self._on_notice(notice, link)
            link.try_connect()
            for event in link.events():
                self._runtime_event(event)
            self._check_carry(link)
            now = self.clock.monotonic()
            if now - last_beat >= HEARTBEAT_S:
                last_beat = now
                with contextlib.suppress(Exception):
                    self.plane.store.heard(self.job.id, self.clock.now())
                self._flush()

    def _on_notice(self, notice: Notice, link: RuntimeLink) -> None:
        now = self.clock.now()
        if notice.cancelled:
            if self._notice is not None and notice.id == self._notice.id:
                self._notice = None
                link.cancel()
                self._set_state(JobState.RUNNING)
                self.report("notice-withdrawn", wording.notice_withdrawn(notice), notice=notice.id)
            return
        if notice.kind is NoticeKind.REBALANCE:
            self.report("rebalance", wording.rebalance(notice, now), notice=notice.id)
            return
        if self._notice is not None and notice.deadline >= self._notice.deadline:
            return  # already pausing for an earlier deadline
        self._notice = notice
        self._probe.asked_at = None  # the pause wins; a check is asked again if it is withdrawn
        deadline = pause_deadline(notice, now)
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
        if not link.connected:
            link.wait_connected(timeout_s=max(0.1, min(5.0, deadline - now)))
        if link.request_pause(deadline):
            self.report("pausing", wording.pausing(deadline, notice.deadline), deadline=deadline)
        else:
            self.report("pause-unreachable", wording.pause_unreachable())

    # --- the checkpoint check ---------------------------------------------------------------

    def _check_carry(self, link: RuntimeLink) -> None:
        """Ask for a check when one is due; report the job blocked when none could run in time.
        A notice always wins: no check is asked for or judged while a pause is wanted."""
        schedule = self._probe
        if not schedule.enabled or self._notice is not None or not link.connected:
            return
        now = self.clock.monotonic()
        if now >= schedule.next_at:
            if link.request_probe(self.clock.now() + schedule.every_s):
                schedule.asked(now)
            return
        if (
            schedule.asked_at is not None
            and not schedule.blocked
            and now - schedule.asked_at >= schedule.blocked_after_s
        ):
            schedule.blocked = True
            reasons = list(schedule.reasons)
            self.report(
                "carry-blocked",
                wording.carry_blocked(schedule.blocked_after_s, reasons),
                machine=self._machine,
                after_s=schedule.blocked_after_s,
                reasons=[to_builtins(r) for r in reasons],
            )

    def _probe_report(self, event: ProbeReport) -> None:
        schedule = self._probe
        was_blocked = schedule.blocked
        schedule.answered(self.clock.monotonic())
        if was_blocked:
            self.report(
                "carry-unblocked", wording.carry_unblocked(event.where), machine=self._machine
            )
        values = [p for p in event.problems if p.kind == "value"]
        for problem in values:
            key = problem_key(to_builtins(problem))
            if key in self._warned:
                continue
            self._warned.add(key)
            self.report(
                "carry-warning",
                wording.carry_warning(problem, self._notice_s()),
                machine=self._machine,
                problem=to_builtins(problem),
            )
        if values or event.partial:
            if event.partial and not values and not schedule.partial_said:
                schedule.partial_said = True
                self.report(
                    "carry-partial",
                    wording.carry_partial(event.where, event.checked_bytes, event.seconds),
                    machine=self._machine,
                )
            return
        if self._warned or not schedule.passed_once:
            self.report(
                "carry-ok",
                wording.carry_ok(
                    event.where, event.checked_bytes, event.seconds, cleared=bool(self._warned)
                ),
                machine=self._machine,
                where=event.where,
                checked_bytes=event.checked_bytes,
                seconds=event.seconds,
            )
            self._warned.clear()
        schedule.passed_once = True

    def _notice_s(self) -> float | None:
        """This machine's notice, for the warning. Local notices (`portal notice`) stand for a
        spot machine's, of the configured default length."""
        return self.plane.settings.notice_default_s

    def _runtime_event(self, event: RuntimeEvent) -> None:
        if isinstance(event, ProbeReport):
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
            self._set_state(JobState.RUNNING)
            self.report("pause-abandoned", wording.abandoned(event.reason), reason=event.reason)
        elif isinstance(event, Failed):
            self._set_state(JobState.RUNNING)
            self.report("pause-failed", wording.pause_failed(event.error))
        elif isinstance(event, Paused):
            self.report(
                "paused",
                wording.paused(event.paused_at, event.bytes),
                where=event.paused_at,
                bytes=event.bytes,
                seconds_to_safe_point=event.seconds_to_safe_point,
            )

    def _finish(self, code: int) -> int:
        now = self.clock.now()
        if self._notice is not None and self._notice.source == "local":
            # The machine this notice was for is gone with this attempt: the next attempt must
            # not take it as its own.
            withdraw_notice(self.paths.notices, self._notice.id)
        if code == EXIT_PAUSED and self.checkpoint_path.exists():
            try:
                ref = self._upload()
            except Exception as exc:
                self.report("upload-failed", wording.upload_failed(exc, self.checkpoint_path))
                self._end(AttemptState.FAILED, JobState.FAILED, code, now)
                return code
            self.checkpoint_path.unlink()
            self.report(
                "suspended",
                wording.suspended(self.job, ref.checkpoint_id, ref.size_bytes),
                checkpoint=ref.checkpoint_id,
                bytes=ref.size_bytes,
            )
            self._end(AttemptState.SUSPENDED, JobState.SUSPENDED, code, now)
        elif code == 0:
            self.report("done", wording.done(self.job), exit_code=0)
            self._end(AttemptState.EXITED, JobState.DONE, code, now)
        else:
            self.report("failed", wording.failed(self.job, code), exit_code=code)
            self._end(AttemptState.FAILED, JobState.FAILED, code, now)
        return code

    def abort(self, exc: BaseException) -> None:
        """End the attempt after a fault of the node itself (the job keeps its checkpoints)."""
        has_checkpoint = False
        with contextlib.suppress(Exception):
            has_checkpoint = self.store.latest_complete(self.job.id) is not None
        state = JobState.SUSPENDED if has_checkpoint else JobState.FAILED
        self._end(AttemptState.FAILED, state, None, self.clock.now())

    def _end(self, attempt: AttemptState, job: JobState, code: int | None, now: float) -> None:
        for _ in range(60):
            try:
                self.plane.store.end_attempt(
                    self.job.id, self.attempt, state=attempt, at=now, exit_code=code
                )
                self.plane.set_state(self.job.id, job)
                break
            except Exception as exc:
                log.warning("control plane unreachable, retrying: %s", exc)
                time.sleep(1.0)
        self._flush()

    def _upload(self) -> Any:
        size = self.checkpoint_path.stat().st_size
        deadline = self._notice.deadline if self._notice is not None else None
        started = time.monotonic()
        with self.store.open_writer(self.job.id, expected_bytes=size, deadline=deadline) as writer:
            with self.checkpoint_path.open("rb") as src:
                while piece := src.read(4 * 1024 * 1024):
                    writer.write(piece)
            ref = writer.commit({"bytes": size, "attempt": self.attempt})
        self.report(
            "uploaded",
            wording.uploaded(ref.size_bytes, time.monotonic() - started),
            checkpoint=ref.checkpoint_id,
        )
        return ref


class _ProbeSchedule:
    """When the node asks for the checkpoint check, and what it is waiting for."""

    def __init__(self, *, enabled: bool, every_s: float, blocked_after_s: float) -> None:
        self.enabled = enabled
        self.every_s = every_s
        self.blocked_after_s = blocked_after_s
        self.next_at = 0.0  # the first check: at the job's first pause point, as soon as it can
        self.asked_at: float | None = None
        self.reasons: list[ProblemRecord] = []
        self.blocked = False
        self.passed_once = False
        self.partial_said = False

    @classmethod
    def for_job(cls, settings: Settings, environ: Mapping[str, str]) -> _ProbeSchedule:
        """The settings, overridden by the job's own PORTAL_CAPTURE_PROBE(_EVERY_S)."""
        with contextlib.suppress(Exception):
            settings = Settings.load(environ=environ)
        try:
            blocked_after = float(environ.get(BLOCKED_AFTER_ENV, BLOCKED_AFTER_S))
        except ValueError:
            blocked_after = BLOCKED_AFTER_S
        return cls(
            enabled=settings.capture_probe != "off",
            every_s=settings.capture_probe_every_s,
            blocked_after_s=blocked_after,
        )

    @property
    def waiting(self) -> bool:
        return self.asked_at is not None

    def asked(self, now: float) -> None:
        if self.asked_at is None:
            self.asked_at = now
            self.reasons = []
        self.next_at = now + self.every_s

    def answered(self, now: float) -> None:
        self.asked_at = None
        self.reasons = []
        self.blocked = False
        self.next_at = now + self.every_s
