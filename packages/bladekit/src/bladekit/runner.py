"""The local runner: a *run* is one logical container, carried across attempts by preemptions.

A run owns a folder ``PORTAL_HOME/bladekit/runs/RUN_ID/`` holding the control-plane request
(``request.json``, the exact bytes of :class:`~bladekit.wire.FunctionRequest`; the runner reads
its settings back from them), the pickled :class:`~bladekit.protocol.ContainerSpec` and one
folder per attempt with that attempt's notice folder. Each attempt is a ``python -m
bladekit._container`` process. A monitor thread per attempt reads its replies, forwards its
stderr, watches the same notice folder to enforce the grace window (a container still alive at
the notice's deadline is killed) and, once the process is gone, releases its mount paths.

Every container is started from one long-lived thread (:class:`_Spawner`) and asks the kernel to
kill it when that thread's process dies (``PR_SET_PDEATHSIG``, see :mod:`bladekit._container`), so
no container outlives its caller, even one killed with SIGKILL.

When an attempt ends by preemption the run counts an interruption and, while the budget
(``max_interruptions``, else :data:`DEFAULT_MAX_INTERRUPTIONS`) allows, the next call starts a new
attempt, whose ``enter`` hooks reload the checkpoint; a call the preemption cut short is sent again.
One preemption more than the budget ends the run with :class:`PreemptedError` carrying the run id.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import pickle
import queue
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import attrs
import cloudpickle

from bladekit import mounts
from bladekit.errors import (
    AppStoppedError,
    ContainerExitedError,
    InvalidArgumentError,
    PreemptedError,
    RemoteError,
    RunError,
    SerializationError,
)
from bladekit.protocol import (
    Call,
    CallFailed,
    CallResult,
    Close,
    ContainerSpec,
    Preempted,
    Ready,
    StartFailed,
    dump_frame,
    split_frames,
)
from bladekit.records import (
    ATTEMPT_ENV,
    CALLER_PID_ENV,
    RUN_DIR_ENV,
    RunState,
    RunStatus,
    write_status,
)
from bladekit.wire import FunctionRequest, decode_request, encode_request
from portal.core.settings import Settings
from portal.providers.local import NOTICE_DIR_ENV, LocalNoticeSource, deliver_notice

__all__ = [
    "DEFAULT_GRACE_S",
    "DEFAULT_MAX_INTERRUPTIONS",
    "Run",
    "RunEvent",
    "find_run_dir",
    "grace_seconds",
]

log = logging.getLogger("bladekit.runner")

#: Preemptions a run survives when its function sets no ``max_interruptions`` (local platform).
DEFAULT_MAX_INTERRUPTIONS = 3
#: Notice length :meth:`Run.preempt` gives by default (what GCP gives a spot VM).
DEFAULT_GRACE_S = 30.0
#: How long an idle container has to exit once told to close, before it is killed.
_CLOSE_WAIT_S = 10.0
#: How long a container whose call was abandoned has to exit after SIGTERM, before SIGKILL.
_TERMINATE_WAIT_S = 2.0


@attrs.frozen(kw_only=True)
class RunEvent:
    """One thing that happened to a run, for people (``message``) and tests (``kind``)."""

    at: float
    attempt: int
    kind: str  # started | notice | notice_ignored | callback_failed | callback_overran |
    # preempted | exited | closed
    message: str


@attrs.define
class _Exited:
    returncode: int


@attrs.define(eq=False)
class _Attempt:
    number: int
    dir: Path
    process: subprocess.Popen[bytes]
    inbox: queue.Queue[Any] = attrs.field(factory=queue.Queue)
    stderr_tail: deque[str] = attrs.field(factory=lambda: deque(maxlen=40))
    deadline: float | None = None
    overran: bool = False
    preempted: Preempted | None = None
    closing: bool = False
    ended: threading.Event = attrs.field(factory=threading.Event)
    accounted: bool = False

    @property
    def notice_dir(self) -> Path:
        return self.dir / "notices"


class _Spawner:
    """Starts every container from one daemon thread that lives as long as this process.

    A container asks to be killed when its parent dies (``PR_SET_PDEATHSIG``), and for Linux the
    parent is the *thread* that started it: a container started from a ``.spawn()`` or map
    worker thread would be killed when that thread ends, under an instance still in use. A
    daemon thread ends only with the process, which is exactly when its containers must go.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._requests: queue.Queue[tuple[list[str], dict[str, Any], Future[Any]]] = queue.Queue()

    def popen(self, argv: list[str], **options: Any) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._pid != os.getpid():  # a forked caller: its own queue and thread
                self._pid, self._thread, self._requests = os.getpid(), None, queue.Queue()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._serve, args=(self._requests,), name="bladekit-spawner", daemon=True
                )
                self._thread.start()
            requests = self._requests
        started: Future[subprocess.Popen[bytes]] = Future()
        requests.put((argv, options, started))
        try:
            return started.result()
        except BaseException:
            # Interrupted while it started: nobody will watch that container, so it goes now.
            started.add_done_callback(_kill_started)
            raise

    @staticmethod
    def _serve(requests: queue.Queue[tuple[list[str], dict[str, Any], Future[Any]]]) -> None:
        while True:
            argv, options, started = requests.get()
            try:
                started.set_result(subprocess.Popen(argv, **options))
            except BaseException as exc:
                started.set_exception(exc)


def _kill_started(started: Future[subprocess.Popen[bytes]]) -> None:
    if started.exception() is None:
        with contextlib.suppress(OSError):
            started.result().kill()


#: The one thread containers are started from (a runtime singleton, see :class:`_Spawner`).
_SPAWNER = _Spawner()


def grace_seconds(seconds: float) -> float:
    """``seconds`` as a notice's grace window; refused unless a finite number above 0."""
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise InvalidArgumentError(
            f"grace window {seconds!r} s is not valid: give a finite number of seconds above 0 "
            f"(a spot provider gives 30 to 120; {DEFAULT_GRACE_S:g} by default)",
            details={"seconds": repr(seconds)},
        )
    return value


def _home() -> Path:
    return Settings.load(plugins=False).home


def find_run_dir(run_id: str, *, home: Path | None = None) -> Path:
    """The folder of run ``run_id`` under ``PORTAL_HOME`` (for helpers outside the caller)."""
    return (home or _home()) / "bladekit" / "runs" / run_id


class Run:
    """One logical container of a function or class, across its attempts. Thread-safe."""

    def __init__(self, spec: ContainerSpec, request: FunctionRequest) -> None:
        self.run_id = f"bk-{uuid.uuid4().hex[:12]}"
        self.dir = find_run_dir(self.run_id)
        self.dir.mkdir(parents=True)
        body = encode_request(request)
        (self.dir / "request.json").write_bytes(body)
        self.request = decode_request(body)  # the settings the run obeys are the ones on the wire
        try:
            spec_bytes = cloudpickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise SerializationError(
                f"{spec.name} cannot be sent to its container: cloudpickle failed with {exc}. "
                "Move what it refers to (open files, locks, clients) into the function body or "
                "an enter hook",
                details={"function": spec.name},
            ) from exc
        (self.dir / "spec.pkl").write_bytes(spec_bytes)
        self.name = spec.name
        self.mount_paths = list(spec.volumes)
        self.preemptible = self.request.gpu_class == "spot"
        limit = self.request.max_interruptions
        self.max_interruptions = DEFAULT_MAX_INTERRUPTIONS if limit is None else limit
        self.interruptions = 0
        self.attempt = 0
        self.events: list[RunEvent] = []
        self._current: _Attempt | None = None
        self._seq = 0
        self._lock = threading.RLock()
        self._failed: PreemptedError | None = None
        self._closed = False
        self._stop_reason: str | None = None
        self._last_call_failed = False
        # True while a caller waits on the container (its start, or a call's reply): a caller
        # that stops waiting (Ctrl-C) leaves it busy, and closing it then stops it at once.
        self._waiting = False
        self._state: RunState = "running"
        self._reason: str | None = None
        self._method: str | None = None  # the last call's method, for the listing
        self.submitted_at = time.time()
        self.ended_at: float | None = None
        self._record()

    def _record(self, state: RunState | None = None, reason: str | None = None) -> None:
        """Write the run's status for other processes (``bladekit.listing``); never fails a run."""
        if state is not None and self._state == "running":
            self._state = state
            self._reason = reason
            self.ended_at = time.time()
        status = RunStatus(
            state=self._state,
            submitted_at=self.submitted_at,
            ended_at=self.ended_at,
            attempts=self.attempt,
            interruptions=self.interruptions,
            owner_pid=os.getpid(),
            owner_host=socket.gethostname(),
            reason=self._reason,
            method=self._method,
        )
        with contextlib.suppress(OSError):
            write_status(self.dir, status)

    # --- events -----------------------------------------------------------------------------------

    def _event(self, kind: str, message: str, *, level: int = logging.INFO) -> None:
        self.events.append(
            RunEvent(at=time.time(), attempt=self.attempt, kind=kind, message=message)
        )
        log.log(level, "run %s: %s", self.run_id, message)

    # --- calls ------------------------------------------------------------------------------------

    def call(self, method: str | None, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        """Run one call in the container and return its value (retried across preemptions)."""
        what = self.name if method is None else f"{self.name}.{method}"
        with self._lock:
            if self._closed:
                raise ContainerExitedError(
                    f"run {self.run_id} of {self.name} is closed: create a new instance to call "
                    f"{what} again",
                    run_id=self.run_id,
                )
            self._seq += 1
            if method != self._method:
                self._method = method
                self._record()
            call = Call(seq=self._seq, method=method, args=tuple(args), kwargs=dict(kwargs))
            try:
                frame = dump_frame(call)
            except Exception as exc:
                raise SerializationError(
                    f"the arguments of {what} cannot be pickled to send them to the container: "
                    f"{exc}. Pass plain data, or open the resource inside the function",
                    details={"function": what},
                ) from exc
            while True:
                attempt = self._ready_attempt()
                if self._stop_reason is not None:
                    raise self._stopped()
                self._send(attempt, frame)
                outcome = self._wait_reply(attempt, call.seq)
                if isinstance(outcome, CallResult):
                    self._last_call_failed = False
                    return outcome.value
                if isinstance(outcome, CallFailed):
                    self._last_call_failed = True
                    raise self._user_error(what, outcome)
                # The attempt ended before answering: a preemption (retry) or a crash (raise).
                self._account(attempt)

    def _send(self, attempt: _Attempt, frame: bytes) -> None:
        stdin = attempt.process.stdin
        assert stdin is not None
        # The attempt may have ended (a preemption) and its pipe been closed meanwhile: the
        # reply is then its end, and the call goes to the next attempt.
        with contextlib.suppress(BrokenPipeError, OSError, ValueError):
            stdin.write(frame)
            stdin.flush()

    def _wait_reply(self, attempt: _Attempt, seq: int) -> CallResult | CallFailed | None:
        self._waiting = True  # left set if the wait is interrupted (see close)
        while True:
            message = attempt.inbox.get()
            if isinstance(message, CallResult | CallFailed) and message.seq == seq:
                self._waiting = False
                return message
            if isinstance(message, _Exited):
                self._waiting = False
                return None

    def _user_error(self, what: str, failed: CallFailed | StartFailed) -> BaseException:
        where = f"in {what} (run {self.run_id}, attempt {self.attempt})"
        if failed.error is not None:
            try:
                exc = pickle.loads(failed.error)
            except Exception:
                exc = None
            if isinstance(exc, BaseException):
                exc.add_note(f"Raised {where}; the container's traceback:\n{failed.traceback_text}")
                return exc
        return RemoteError(
            f"{what} raised {failed.type_name} {where}, which could not be sent back as itself "
            f"(it cannot be pickled). The container's traceback:\n{failed.traceback_text}",
            type_name=failed.type_name,
            traceback_text=failed.traceback_text,
            details={"function": what, "run_id": self.run_id, "type": failed.type_name},
        )

    # --- attempts ---------------------------------------------------------------------------------

    def _ready_attempt(self) -> _Attempt:
        """The running attempt, starting a new one (after accounting the last) when needed."""
        current = self._current
        if current is not None and current.ended.is_set():
            self._account(current)
            current = None
        if self._failed is not None:
            raise self._failed
        if self._stop_reason is not None:
            raise self._stopped()
        if current is None:
            current = self._start_attempt()
        return current

    def _start_attempt(self) -> _Attempt:
        number = self.attempt + 1
        folder = self.dir / "attempts" / str(number)
        (folder / "notices").mkdir(parents=True)
        # Published before ``self.attempt`` moves, so whoever sees the new number finds its folder.
        tmp = self.dir / "current_attempt.tmp"
        tmp.write_text(str(number), encoding="utf-8")
        os.replace(tmp, self.dir / "current_attempt")
        self.attempt = number
        env = dict(os.environ)
        # The container imports what the caller could: user modules pickled by reference.
        env["PYTHONPATH"] = os.pathsep.join(p or os.getcwd() for p in sys.path)
        env[NOTICE_DIR_ENV] = str(folder / "notices")
        env[RUN_DIR_ENV] = str(self.dir)
        env[ATTEMPT_ENV] = str(number)
        env[CALLER_PID_ENV] = str(os.getpid())
        process = _SPAWNER.popen(
            [sys.executable, "-m", "bladekit._container", str(self.dir), str(self.attempt)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,  # a Ctrl-C in the caller's terminal is the caller's to handle
        )
        attempt = _Attempt(number=self.attempt, dir=folder, process=process)
        self._current = attempt
        threading.Thread(
            target=self._monitor, args=(attempt,), name=f"bladekit-{self.run_id}", daemon=True
        ).start()
        self._record()
        self._waiting = True  # left set if the wait is interrupted (see close)
        message = attempt.inbox.get()
        self._waiting = False
        if isinstance(message, Ready):
            self._event("started", f"attempt {attempt.number} started (pid {message.pid})")
            return attempt
        attempt.ended.wait()
        self._current = None
        if attempt.deadline is not None and not isinstance(message, StartFailed):
            # Preempted while starting (killed at the deadline before Ready): a preemption like
            # any other, counted against the budget; the caller's next step starts a new attempt.
            self._account(attempt)
            return self._start_attempt()
        # Mounting or an enter hook failed: that attempt is over; the error is the caller's.
        self._event("exited", f"attempt {attempt.number} failed to start")
        if isinstance(message, StartFailed):
            self._last_call_failed = True
            raise self._user_error(f"{self.name} (starting the container)", message)
        raise self._crash(attempt)

    def _account(self, attempt: _Attempt) -> None:
        """Count how ``attempt`` ended; raises when that ends the run."""
        attempt.ended.wait()
        if self._current is attempt:
            self._current = None
        if attempt.accounted:
            return
        attempt.accounted = True
        if attempt.closing and attempt.preempted is None and not attempt.overran:
            return
        if self._stop_reason is not None and attempt.preempted is None:
            raise self._stopped()
        if attempt.preempted is None and attempt.deadline is None:
            raise self._crash(attempt)
        self.interruptions += 1
        note = attempt.preempted
        if note is not None and note.callback_error is not None:
            self._event(
                "callback_failed",
                f"on_preempt callback {note.callback} raised during attempt {attempt.number}; "
                "the attempt ended anyway and the next one resumes from the last committed "
                f"checkpoint:\n{note.callback_error}",
                level=logging.WARNING,
            )
        self._event(
            "preempted",
            f"attempt {attempt.number} was preempted ({self.interruptions} of "
            f"{self.max_interruptions} interruptions allowed)",
        )
        if self.interruptions > self.max_interruptions:
            self._failed = PreemptedError(
                f"run {self.run_id} of {self.name} was preempted {self.interruptions} "
                f"time{'' if self.interruptions == 1 else 's'}, more "
                f"than max_interruptions={self.max_interruptions} allows. Raise "
                "max_interruptions, or use gpu_class='reserved' for a run that must not be "
                "interrupted",
                run_id=self.run_id,
                details={
                    "interruptions": self.interruptions,
                    "max_interruptions": self.max_interruptions,
                    "function": self.name,
                },
            )
            # Raised to the caller, which reports it: logged for the record only.
            self._event("failed", str(self._failed), level=logging.DEBUG)
            self._record(
                "preempted-out",
                f"preempted {self.interruptions} time{'' if self.interruptions == 1 else 's'}, "
                "more than "
                f"max_interruptions={self.max_interruptions} allows",
            )
            raise self._failed
        self._record()

    def _stopped(self) -> AppStoppedError:
        return AppStoppedError(
            f"run {self.run_id} of {self.name} was stopped before its call finished: "
            f"{self._stop_reason}",
            run_id=self.run_id,
            details={"function": self.name},
        )

    def _crash(self, attempt: _Attempt) -> RunError:
        if self._stop_reason is not None:
            return self._stopped()
        code = attempt.process.returncode
        self._record("failed", f"its container exited with status {code} without answering")
        tail = "".join(attempt.stderr_tail).strip()
        self._event("exited", f"attempt {attempt.number} exited with status {code}")
        return ContainerExitedError(
            f"the container of run {self.run_id} ({self.name}, attempt {attempt.number}) exited "
            f"with status {code} without answering and without a preemption notice. Its last "
            f"output:\n{tail or '(none)'}",
            run_id=self.run_id,
            details={"attempt": attempt.number, "returncode": code},
        )

    # --- the monitor ------------------------------------------------------------------------------

    def _monitor(self, attempt: _Attempt) -> None:
        process = attempt.process
        assert process.stdout is not None and process.stderr is not None
        notices = LocalNoticeSource(attempt.notice_dir)
        buffer = bytearray()
        log_file = open(attempt.dir / "container.log", "ab")  # noqa: SIM115 - closed below
        selector = selectors.DefaultSelector()
        selector.register(process.stdout, selectors.EVENT_READ, "out")
        selector.register(process.stderr, selectors.EVENT_READ, "err")
        open_streams = 2
        try:
            while open_streams:
                for key, _ in selector.select(timeout=0.1):
                    data = os.read(key.fd, 65536)
                    if not data:
                        selector.unregister(key.fileobj)
                        open_streams -= 1
                    elif key.data == "out":
                        buffer.extend(data)
                        for message in split_frames(buffer):
                            if isinstance(message, Preempted):
                                attempt.preempted = message
                            attempt.inbox.put(message)
                    else:
                        log_file.write(data)
                        attempt.stderr_tail.append(data.decode("utf-8", "replace"))
                        with contextlib.suppress(OSError):
                            os.write(2, data)
                self._enforce_deadline(attempt, notices)
        finally:
            selector.close()
            log_file.close()
            process.wait()
            for stream in (process.stdin, process.stdout, process.stderr):
                with contextlib.suppress(OSError):
                    if stream is not None:
                        stream.close()
            for path in self.mount_paths:
                mounts.release(path, process.pid)
            # The attempt's private mount folders (namespace mounts): the next attempt, like a
            # fresh machine, starts from the volume's last commit.
            shutil.rmtree(mounts.attempt_dir(self.dir, attempt.number), ignore_errors=True)
            with contextlib.suppress(OSError):  # the run's folder there, once its last is gone
                mounts.attempt_dir(self.dir, attempt.number).parent.rmdir()
            attempt.ended.set()
            attempt.inbox.put(_Exited(process.returncode))

    def _enforce_deadline(self, attempt: _Attempt, notices: LocalNoticeSource) -> None:
        if self.preemptible:
            for notice in notices.poll():
                if not notice.cancelled and attempt.deadline is None:
                    attempt.deadline = notice.deadline
                    self._event(
                        "notice",
                        f"attempt {attempt.number} got preemption notice {notice.id}: "
                        f"{notice.remaining_s(time.time()):.1f} s to checkpoint",
                    )
        if (
            attempt.deadline is not None
            and time.time() >= attempt.deadline
            and attempt.process.poll() is None
        ):
            attempt.overran = True
            with contextlib.suppress(ProcessLookupError):
                attempt.process.send_signal(signal.SIGKILL)
            self._event(
                "callback_overran",
                f"attempt {attempt.number} was still running at the end of its grace window: "
                "the on_preempt callback did not finish in time (or the call could not be "
                "interrupted), so the container was stopped. Work since the last committed "
                "checkpoint is lost; make the callback faster or save checkpoints more often",
                level=logging.WARNING,
            )

    # --- preempting and closing -------------------------------------------------------------------

    def preempt(
        self,
        seconds: float = DEFAULT_GRACE_S,
        *,
        wait: bool = False,
        reason: str = "bladekit test",
    ) -> bool:
        """Deliver a preemption notice to the running container; False if it was not delivered.

        ``seconds`` is the grace window: the container is killed when it ends. With ``wait``,
        return only once the container has acted on it (callback run, process gone), so the
        next call surely goes to a new attempt. Refused (logged, False) for
        ``gpu_class="reserved"`` runs, which are never preempted, and when no container runs.
        """
        seconds = grace_seconds(seconds)
        if not self.preemptible:
            self._event(
                "notice_ignored",
                f"notice refused: {self.name} runs on gpu_class='reserved' capacity, which is "
                "never preempted",
                level=logging.WARNING,
            )
            return False
        current = self._current
        if current is None or current.ended.is_set():
            self._event("notice_ignored", "notice not delivered: no container is running")
            return False
        deliver_notice(current.notice_dir, seconds=seconds, reason=reason)
        if wait:
            current.ended.wait()  # bounded: the monitor kills the container at the deadline
        return True

    def stop(self, reason: str) -> None:
        """End the run now: an idle run closes; a call in flight is cut short (its container is
        killed) and raises :class:`~bladekit.errors.AppStoppedError` carrying ``reason``."""
        if self._lock.acquire(blocking=False):
            try:
                self.close()
            finally:
                self._lock.release()
            return
        self._stop_reason = reason
        attempt = self._current
        if attempt is not None:
            self._terminate(attempt)

    def close(self) -> None:
        """Let the container exit once idle; release its mounts.

        A container still busy for a caller that stopped waiting (interrupted by Ctrl-C while a
        call ran) has nobody to answer: it is stopped at once and the run recorded as failed.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._waiting and self._stop_reason is None:
                self._stop_reason = "its caller stopped waiting for the call (interrupted)"
            try:
                self._close_attempt()
            finally:
                if self._stop_reason is not None:
                    self._record("failed", f"stopped: {self._stop_reason}")
                elif self._last_call_failed:
                    self._record("failed", "its last call raised")
                else:
                    self._record("done")

    def _terminate(self, attempt: _Attempt) -> None:
        """Stop ``attempt``'s container now: SIGTERM, a short wait, then SIGKILL."""
        with contextlib.suppress(ProcessLookupError):
            attempt.process.terminate()
        if not attempt.ended.wait(_TERMINATE_WAIT_S):
            with contextlib.suppress(ProcessLookupError):
                attempt.process.kill()
            attempt.ended.wait()

    def _close_attempt(self) -> None:
        attempt = self._current
        if attempt is None:
            return
        if self._stop_reason is not None and not attempt.ended.is_set():
            attempt.closing = True
            self._terminate(attempt)
            self._current = None
            self._event("closed", f"run stopped after {self.attempt} attempt(s)")
            return
        if attempt.ended.is_set():  # preempted (or crashed) while idle: record how
            with contextlib.suppress(Exception):
                self._account(attempt)
            self._current = None
            return
        attempt.closing = True
        with contextlib.suppress(Exception):
            self._send(attempt, dump_frame(Close()))
        if not attempt.ended.wait(_CLOSE_WAIT_S):
            with contextlib.suppress(ProcessLookupError):
                attempt.process.kill()
            attempt.ended.wait()
        self._current = None
        self._event("closed", f"run closed after {self.attempt} attempt(s)")

    def __repr__(self) -> str:
        return f"<bladekit run {self.run_id} of {self.name}: attempt {self.attempt}>"
