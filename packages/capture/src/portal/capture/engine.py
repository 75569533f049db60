"""The pause lifecycle: a request arrives, line events go on, a safe point is found (or the
deadline passes), the checkpoint is written and the process exits with 75.

States: idle (nothing instrumented) -> pending (line events on; each user line tries a pause,
backing off after a failed serialization since each try walks the whole state) -> capturing ->
exit. A pending pause ends without a checkpoint when it is cancelled or its deadline passes:
line events go off again and the program runs on at full speed.

Requests come from any thread (the control channel's watcher) or from a signal (SIGTERM). Line
events must be switched on the main thread on 3.11, so a request from another thread wakes it
with ``SIGUSR1``; the handler runs between two bytecodes of the main thread within a fraction
of a millisecond, or right after the native call it is in returns.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import CodeType, FrameType
from typing import Any, Final, Protocol

import attrs
import msgspec

from portal.capture import frames as _frames
from portal.capture import remade
from portal.capture.held import HeldValues
from portal.capture.image import CheckpointImage, write_image
from portal.capture.probing import rehearsal_path, rehearse
from portal.capture.problems import Problem, where
from portal.capture.restoring import register_live
from portal.capture.safepoint import LineEvents
from portal.capture.snapshot import (
    PORTAL_AT_WORK,
    CaptureContext,
    check_position,
    outermost_obstacle,
    take_snapshot,
)
from portal.capture.unseen import UnseenThread
from portal.core.errors import PortalError
from portal.runtime.protocol import (
    EXIT_PAUSED,
    Abandoned,
    Checkpointed,
    Deferred,
    Failed,
    NotCheckpointed,
    Paused,
    Pending,
    ProbeReport,
    ProblemRecord,
)

__all__ = [
    "EXIT_PAUSED",
    "Abandoned",
    "Deferred",
    "Engine",
    "Event",
    "Failed",
    "PauseGroup",
    "Paused",
    "Pending",
    "ProbeReport",
    "output_file_size",
]

WAKE_SIGNAL: Final = signal.SIGUSR1
_BACKOFF_FIRST: Final = 0.01
_BACKOFF_MAX: Final = 0.5
_HISTORY_MAX: Final = 50
#: How long a rank waits for its peers to agree on a periodic checkpoint (which has no deadline
#: of its own) before it runs on, to try again at a later line.
_GROUP_AGREE_S: Final = 30.0
#: How often the watcher looks again while a pause's state is being taken past its deadline
#: (it does not abandon it; it only learns when the taking ended without a checkpoint).
_SNAPSHOT_POLL_S: Final = 0.25
#: The check that follows a start-up check waits this long, at most, for the work to begin.
IN_WORK_WAIT_S: Final = 120.0
#: The checkpoint check's walk stops after this long; a larger state is reported as partial.
PROBE_BUDGET_S: Final = 5.0


Event = (
    Pending | Deferred | Paused | Abandoned | Failed | ProbeReport | Checkpointed | NotCheckpointed
)


class PauseGroup(Protocol):
    """The peers a pause must be agreed with: the ranks of a multi-process job
    (:class:`portal.capture.distributed.rank.RankSession`). With one, a safe point is a pause
    point only once every rank agreed on it; the part is then written and committed with the
    others', and the process exits 75 only once the whole set is written."""

    def agree(self, deadline: float) -> bool: ...
    def drain(self) -> None: ...
    def record(self) -> Any: ...
    def abort(self, reason: str) -> None: ...
    def commit(self, part: dict[str, Any], deadline: float) -> str: ...


class _ProbeStopped(BaseException):
    """Unwinds a checkpoint check in progress: a pause was asked for, or its time ran out.

    A BaseException, so that no ``except Exception`` on the way (the pickler's, a diagnosis's)
    takes it for a value that cannot be pickled.
    """


def _error_text(exc: BaseException) -> str:
    """An error as an event says it: Portal's own errors by their message (it names the cause
    and the way out), others with their type."""
    return str(exc) if isinstance(exc, PortalError) else f"{type(exc).__name__}: {exc}"


def _held_copy(image: CheckpointImage) -> CheckpointImage | None:
    """``image`` with its out-of-band buffers copied (the program may change them as soon as
    it runs on), when the copy takes at most a quarter of the memory available; else None."""
    held = sum(b.nbytes for b in image.buffers)
    try:
        with open("/proc/meminfo", "rb") as fh:
            fields = dict(line.split(b":", 1) for line in fh.read().splitlines() if b":" in line)
        available = int(fields[b"MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError, IndexError):
        return None
    if held > available // 4:
        return None
    return attrs.evolve(image, buffers=[memoryview(b.tobytes()) for b in image.buffers])


def _bytes_walked(frame: FrameType | None) -> int:
    """How much the pickle a stopped check was writing had reached (its counting sink)."""
    from portal.capture import pickler

    code = pickler.dumps.__code__
    while frame is not None:
        if frame.f_code is code:
            return int(getattr(frame.f_locals.get("sink"), "size", 0))
        frame = frame.f_back
    return 0


class _ProbeWanted:
    __slots__ = ("backoff", "deadline", "in_work", "keep_at", "next_try", "ready", "requested")

    def __init__(
        self,
        requested: float,
        deadline: float | None,
        keep_at: Path | None = None,
        *,
        in_work: bool = False,
    ) -> None:
        self.requested = requested
        self.deadline = deadline
        # A periodic checkpoint: the check's walk, kept and written here (the program runs on).
        self.keep_at = keep_at
        # The check that follows one made during start-up: taken only once the work has begun
        # (see Engine._in_work).
        self.in_work = in_work
        # A walk that met a value needing a later line (WaitForSafePoint) tries again from then.
        self.next_try = 0.0
        self.backoff = _BACKOFF_FIRST
        self.ready: Callable[[], bool] | None = None

    def wait(self, now: float, ready: Callable[[], bool] | None) -> None:
        """Back off before the next walk, as a deferred pause does (or until ``ready``)."""
        self.next_try = now + self.backoff
        self.backoff = min(self.backoff * 2, _BACKOFF_MAX)
        self.ready = ready

    def due(self, now: float) -> bool:
        return now >= self.next_try or _ready(self.ready)


class _Request:
    __slots__ = ("deadline", "requested", "source")

    def __init__(self, deadline: float, source: str, requested: float) -> None:
        self.deadline = deadline
        self.source = source
        self.requested = requested


class Engine:
    """Pauses the running script at a safe point and writes its checkpoint.

    :param context: the program being run (see :class:`CaptureContext`).
    :param checkpoint_path: where the checkpoint goes.
    :param notify: receives every :data:`Event` (the control channel sends them to the node).
    :param clock: unix time, injected so tests of deadlines need not sleep.
    :param sigterm_grace: seconds a SIGTERM-requested pause may take before it is abandoned.
    :param before_exit: called just before the paused process exits (close channels).
    :param probe_budget: seconds a checkpoint check may walk the state before it reports partial.
    :param rehearse: a check also writes a real checkpoint beside ``checkpoint_path`` and deletes
        it (``capture_probe = full`` on an on-demand machine); its report's ``checked_bytes`` and
        ``seconds`` are then the rehearsed checkpoint's size on disk and the whole check's time.
    :param group: the ranks to agree a pause with (a multi-process job), see :class:`PauseGroup`.
    """

    def __init__(
        self,
        context: CaptureContext,
        *,
        checkpoint_path: str | os.PathLike[str],
        notify: Callable[[Event], None] = lambda event: None,
        clock: Callable[[], float] = time.time,
        sigterm_grace: float = 30.0,
        before_exit: Callable[[], None] = lambda: None,
        probe_budget: float = PROBE_BUDGET_S,
        rehearse: bool = False,
        group: PauseGroup | None = None,
    ) -> None:
        self.context = context
        self._group = group
        self.checkpoint_path = Path(checkpoint_path)
        self._notify = notify
        self._clock = clock
        self._sigterm_grace = sigterm_grace
        self._before_exit = before_exit
        # Re-entrant: the control channel's SIGIO handler runs requests on the main thread, and
        # may interrupt the main thread inside one of these short sections (a plain lock would
        # then wait for itself for ever).
        self._lock = threading.RLock()
        self._request: _Request | None = None
        self._capturing = False
        #: The request whose state is being taken now (its safe point was reached in time).
        self._snapshotting: _Request | None = None
        self._in_callback = False
        self._main = threading.main_thread().ident
        self._events = LineEvents(
            context.has_safe_points if group is None else self._rank_safe_points, self._on_line
        )
        self._backoff = _BACKOFF_FIRST
        self._next_try = 0.0
        self._ready: Callable[[], bool] | None = None  # a WaitForSafePoint's "try again now"
        #: The frame slots holding what the last try could not carry (portal.capture.held).
        self._held: HeldValues | None = None
        self._history: dict[tuple[str, str, str, str], Problem] = {}
        self._last_reported: frozenset[tuple[str, str, str]] = frozenset()
        self._previous_handlers: dict[int, Any] = {}
        self._probe: _ProbeWanted | None = None
        self._probe_reported: frozenset[tuple[str, str, str]] = frozenset()
        self._probing_until: float | None = None  # set while a check walks the state
        self._probe_walked = 0  # bytes a check that was stopped had pickled
        self._probe_budget = probe_budget
        #: Whether this process has taken a check once its work had begun (_check_again_in_work).
        self._work_checked = False
        self._rehearse = rehearse
        self.armed = False

    # -- arming -----------------------------------------------------------------------------

    def arm(self) -> None:
        """Install the signal handlers (main thread). Nothing else runs until a request."""
        for signum, handler in ((signal.SIGTERM, self._on_sigterm), (WAKE_SIGNAL, self._on_wake)):
            self._previous_handlers[signum] = signal.signal(signum, handler)
        self._events.prepare()
        self._warm_up()
        self.armed = True
        register_live(self)  # its handlers, held by the program's state, find it

    def _rank_safe_points(self, code: CodeType) -> bool:
        """A rank of a multi-process job pauses at a line of the program's own code only (a
        library's frames outside it travel as ever). The ballot rests on a rank at a safe point
        having no collective in flight, which a line of the script's guarantees and a line
        inside a library's step does not (DDP's forward issues its own); and with a
        library's every line a try, the ranks' tries seldom met at one count (a periodic
        checkpoint of a DDP job went unagreed for 30 s, one run in eight)."""
        return self.context.has_safe_points(code) and self.context.user_code.is_user_code(code)

    def _warm_up(self) -> None:
        """Classify the files on the stack now (the runtime's, the script's), so the first
        pause pays no path lookups between its signal and its safe point."""
        user_code = self.context.user_code
        user_code.is_carried_file(user_code.script)
        f: FrameType | None = sys._getframe()
        while f is not None:
            self.context.has_safe_points(f.f_code)
            user_code.is_portal_file(f.f_code.co_filename)
            f = f.f_back

    def finish(self) -> None:
        """The script has ended: a late notice has nothing left to pause. Ignore the signals
        (the interpreter's shutdown would otherwise restore their deadly defaults)."""
        with self._lock:
            self._capturing = True  # no request is taken any more
            self._request = None
            self._probe = None
        self._events.disable()
        for signum in self._previous_handlers:
            signal.signal(signum, signal.SIG_IGN)

    def disarm(self) -> None:
        for signum, handler in self._previous_handlers.items():
            signal.signal(signum, handler)
        self._previous_handlers.clear()
        self._events.close()
        self.armed = False

    # -- requests (any thread) --------------------------------------------------------------

    def pending(self) -> bool:
        """True while a real pause is wanted (``portal.runtime.rt.pending()``)."""
        request = self._request
        if request is None:
            return False
        now = self._clock()
        # A script that asks is about to release what held the pause up: try again soon.
        self._next_try = min(self._next_try, now + _BACKOFF_FIRST)
        return now < request.deadline

    def wanted(self) -> bool:
        """True while a pause or a periodic checkpoint is wanted (no side effect, any thread:
        a rank's peers need its counts meanwhile)."""
        request = self._request
        if request is not None and self._clock() < request.deadline:
            return True
        probe = self._probe
        return probe is not None and probe.keep_at is not None

    def deadline(self) -> float | None:
        """When the watcher must next call :meth:`expire`: the pause's deadline, or a little
        later while its state is being taken (which the deadline does not cut short)."""
        request = self._request
        if request is None:
            return None
        if self._snapshotting is request:
            return max(request.deadline, self._clock() + _SNAPSHOT_POLL_S)
        return request.deadline

    def request_pause(self, deadline: float, source: str) -> None:
        """Ask for a pause at the next safe point before ``deadline`` (unix time)."""
        with self._lock:
            if self._capturing:
                return
            if self._request is None:
                self._request = _Request(deadline, source, self._clock())
                self._backoff = _BACKOFF_FIRST
                self._next_try = 0.0
                self._ready = None
                self._history.clear()
                self._last_reported = frozenset()
            else:  # two requests: the earlier deadline holds
                self._request.deadline = min(self._request.deadline, deadline)
            event = Pending(source=source, deadline=self._request.deadline)
        self._notify(event)
        self._wake()

    def request_probe(self, deadline: float | None = None) -> None:
        """Ask for a checkpoint check at the next safe point (waiting until ``deadline``).

        A pending pause goes first; a check already waiting keeps its place.
        """
        with self._lock:
            if self._capturing:
                return
            if self._probe is None:
                self._probe = _ProbeWanted(self._clock(), deadline)
                self._probe_reported = frozenset()
            else:
                self._probe.deadline = deadline
        self._wake()

    def request_checkpoint(
        self, path: str | os.PathLike[str], deadline: float | None = None
    ) -> None:
        """Ask for a periodic checkpoint: at the next safe point, write the state to ``path``
        and run on (:class:`Checkpointed`). It takes the place of a check that is waiting (a
        checkpoint that succeeds answers it too); a pause asked for meanwhile wins."""
        with self._lock:
            if self._capturing:
                return
            if self._probe is None:
                self._probe = _ProbeWanted(self._clock(), deadline, Path(path))
                self._probe_reported = frozenset()
            else:
                self._probe.deadline = deadline
                self._probe.keep_at = Path(path)
        self._wake()

    def stop_probe_if_due(self, frame: FrameType | None = None) -> None:
        """Called at the end of the main thread's signal handlers: a check walking the state
        stops at once when a pause is wanted or its time is up (the pause is then taken at the
        same safe point). ``frame``: the frame the signal interrupted (default: the caller's)."""
        until = self._probing_until
        if until is None or threading.get_ident() != self._main:
            return
        if self._request is not None or time.monotonic() >= until:
            self._probing_until = None
            self._probe_walked = _bytes_walked(frame or sys._getframe(1))
            raise _ProbeStopped

    def cancel(self, reason: str = "cancelled") -> None:
        """Give up a pending pause; line events go off again."""
        with self._lock:
            if self._request is None or self._capturing:
                return
            self._request = None
            problems = self._problem_records()
        self._notify(Abandoned(reason=reason, problems=problems))
        self._wake()

    def expire(self) -> None:
        """Abandon a pending pause whose deadline has passed (the watcher calls this on time,
        even while the main thread is inside a long native call)."""
        request = self._request
        if request is not None and self._clock() >= request.deadline:
            self._abandon_deadline(request)

    def _wake(self) -> None:
        if threading.get_ident() == self._main:
            self._sync(sys._getframe(1))
        elif self.armed:
            signal.pthread_kill(self._main, WAKE_SIGNAL)  # type: ignore[arg-type]

    # -- main thread ------------------------------------------------------------------------

    def _sync(self, frame: FrameType | None) -> None:
        """Line events on while a request is pending, off otherwise."""
        if self._in_callback:
            return  # the line callback in progress sees the new state itself
        if self._request is not None or self._probe is not None:
            self._events.enable(frame)
        else:
            self._events.disable()

    def _on_wake(self, signum: int, frame: FrameType | None) -> None:
        self._sync(outside_portal(frame, self.context))
        self.note_obstacle(frame)
        self.stop_probe_if_due(frame)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.request_pause(self._clock() + self._sigterm_grace, "sigterm")
        self._sync(outside_portal(frame, self.context))
        self.note_obstacle(frame)
        self.stop_probe_if_due(frame)

    def note_obstacle(self, frame: FrameType | None) -> None:
        """Called by the main thread's signal handlers with the frame they interrupted: a pause
        asked for while the program runs inside an obstacle (an import of a library, a frame
        called through C) says so at once, and listens only outside it. Otherwise the first
        line event would, but none comes while a library's import runs (torch's take seconds),
        and the pause would be taken late with no reason given. Costs nothing without a pause
        pending."""
        if frame is None or self._in_callback or self._request is None:
            return
        if threading.get_ident() != self._main:
            return
        frame = outside_portal(frame, self.context)
        if frame is None:
            return
        if not self._events.enabled or self._events.narrowed:
            return
        if outermost_obstacle(frame, self.context) is None:
            return  # no obstacle, or the script is not running yet
        position = check_position(frame, self.context)
        if isinstance(position, Problem) and position.type_name != PORTAL_AT_WORK:
            self._defer([position])
            self._listen_outside_obstacle(frame)

    def _abandon_deadline(self, request: _Request) -> None:
        with self._lock:
            if self._request is not request or self._capturing:
                return
            if self._snapshotting is request:
                return  # its safe point came in time: the pause is being taken, not abandoned
            self._request = None
            problems = self._problem_records()
        self._notify(Abandoned(reason="deadline", problems=problems))
        if request.source == "sigterm":
            listed = (
                "; ".join(str(p) for p in self._history.values()) or "no safe point was reached"
            )
            print(
                f"portal: the pause requested by SIGTERM was abandoned at its deadline: {listed}",
                file=sys.stderr,
                flush=True,
            )
        self._wake()

    def _problem_records(self) -> list[ProblemRecord]:
        return [ProblemRecord(**p.to_dict()) for p in self._history.values()]

    def _defer(self, problems: list[Problem]) -> None:
        for p in problems:
            key = (p.kind, p.name, p.type_name, p.reason)
            if key not in self._history and len(self._history) < _HISTORY_MAX:
                self._history[key] = p
        current = frozenset((p.name, p.type_name, p.reason) for p in problems)
        if current != self._last_reported:
            self._last_reported = current
            self._notify(Deferred(problems=[ProblemRecord(**p.to_dict()) for p in problems]))

    def _on_line(self, frame: FrameType) -> None:
        if self._in_callback:
            return
        self._in_callback = True
        try:
            held, request = self._held, self._request
            if held is not None:
                if request is not None and self._clock() < min(self._next_try, request.deadline):
                    if not held.gone(frame):
                        return  # what failed is still held: no try can pass yet
                    self._next_try = 0.0  # it has left: try at this very line
                self._held = None
            # A line after narrowing is an outer frame's: the obstacle has left the stack.
            self._events.widen()
            if self._request is None and self._probe is not None:
                self._try_probe(frame)
            self._try_pause(frame)  # also a pause asked for while the check ran: same point
        finally:
            self._in_callback = False
        if self._request is None and self._probe is None:
            self._events.disable()

    # -- the checkpoint check ---------------------------------------------------------------

    def _try_probe(self, frame: FrameType) -> None:
        wanted = self._probe
        if wanted is None:
            return
        if wanted.deadline is not None and self._clock() >= wanted.deadline:
            self._probe = None  # no safe point in time; the node has said so
            if wanted.keep_at is not None:
                self._notify(NotCheckpointed(reason="deadline"))
            return
        if not wanted.due(self._clock()):
            return
        position = check_position(frame, self.context)
        if isinstance(position, Problem) and position.type_name == PORTAL_AT_WORK:
            return  # a library line Portal's own code ran: the program is not here
        if isinstance(position, Problem):  # cheap to check again: at the next line
            self._probe_waits(wanted, [position], back_off=False)
            self._listen_outside_obstacle(frame)
            return
        if wanted.in_work and not self._in_work(position, wanted.requested):
            return  # still starting: the check waits for the work's first pause point
        self._probe = None
        if wanted.keep_at is not None and self._group is not None:
            self._group_checkpoint(frame, position, wanted, self._group)
            return
        if wanted.keep_at is not None:
            done = self._checkpoint_here(frame, position, wanted, wanted.keep_at)
            if done is not None:  # else it waits, or a writer thread reports once it is whole
                self._notify(done)
            return
        at = where(frame, self.context.user_code.is_user_code)
        started = time.monotonic()
        report: ProbeReport | None = None
        timer = threading.Timer(self._probe_budget, self._probe_time_up)
        timer.daemon = True
        try:
            try:
                self._probing_until = started + self._probe_budget
                timer.start()
                result = take_snapshot(frame, position, self.context, keep=self._rehearse)
            finally:
                self._probing_until = None
                timer.cancel()
            if _waiting(result.problems):
                self._probe_waits(wanted, result.problems, ready=result.ready)
                return
            checked = result.pickle_size
            if result.image is not None:  # a rehearsal: written whole, measured, deleted
                checked = rehearse(result.image, rehearsal_path(self.checkpoint_path)).bytes
                result = result._replace(image=None)
            report = ProbeReport(
                problems=[ProblemRecord(**p.to_dict()) for p in result.problems],
                checked_bytes=checked,
                where=at,
                seconds=time.monotonic() - started,
            )
        except _ProbeStopped:
            if self._request is None:  # its time ran out (a pause wanted: no report, it wins)
                report = ProbeReport(partial=True, where=at, seconds=time.monotonic() - started)
        except Exception as exc:  # a reducer that broke: report it as what cannot be carried
            report = ProbeReport(
                problems=[
                    ProblemRecord(
                        name="<state>",
                        type_name="checkpoint",
                        reason=f"{type(exc).__name__}: {exc}",
                        where=at,
                    )
                ],
                where=at,
                seconds=time.monotonic() - started,
            )
        if report is not None:
            self._notify(report)
            self._check_again_in_work(wanted, position)

    # -- the check once the work has begun --------------------------------------------------

    def _in_work(self, chain: Sequence[FrameType], since: float) -> bool:
        """Whether the program's work has begun at this safe point: a library's loop has called
        back into the script (a script frame inside a library frame: ``trainer.train()``
        calling a callback), a frame of the script's own code is inside a loop (``for`` or
        ``while``), or :data:`IN_WORK_WAIT_S` have passed ``since`` the check was wanted."""
        user = self.context.user_code.is_user_code
        inside_library = False
        for f in reversed(chain):  # outermost first
            if not user(f.f_code):
                inside_library = True
            elif inside_library or _frames.in_loop(f.f_code, f.f_lasti):
                return True
        return self._clock() - since >= IN_WORK_WAIT_S

    def _check_again_in_work(self, done: _ProbeWanted, chain: Sequence[FrameType]) -> None:
        """The process's first check is usually taken during start-up (the imports), before
        the objects a training run holds exist (a writer, a trainer, a loader's iterator):
        one more is taken as soon as the work has begun (:meth:`_in_work`), then the node's
        schedule goes on (every ``capture_probe_every_s``)."""
        if self._work_checked or done.keep_at is not None or self._group is not None:
            return  # (a rank's checks are the launcher's to ask: every rank's at once)
        self._work_checked = True
        if done.in_work or self._in_work(chain, self._clock()):
            return  # this one already was
        with self._lock:
            if self._probe is None and self._request is None and not self._capturing:
                self._probe = _ProbeWanted(self._clock(), None, in_work=True)

    def _probe_waits(
        self,
        wanted: _ProbeWanted,
        problems: Sequence[Problem],
        *,
        back_off: bool = True,
        ready: Callable[[], bool] | None = None,
    ) -> None:
        """The check (or periodic checkpoint) cannot walk at this line but can at a later one:
        keep it wanted, back off after a whole walk, and say what it waits for once (the
        node's blocked report)."""
        with self._lock:
            if self._probe is None:
                self._probe = wanted
        if back_off:
            wanted.wait(self._clock(), ready)
        if wanted.in_work:
            return  # the runtime's own follow-up: no node waits on it, nothing to explain
        records = [ProblemRecord(**p.to_dict()) for p in problems]
        current = frozenset((p.name, p.type_name, p.reason) for p in records)
        if current != self._probe_reported:
            self._probe_reported = current
            self._notify(Deferred(problems=records))

    def _checkpoint_here(
        self, frame: FrameType, position: Any, wanted: _ProbeWanted, target: Path
    ) -> Checkpointed | NotCheckpointed | None:
        """A periodic checkpoint at this safe point: the program is held while its state is
        captured, then runs on. A pause asked for meanwhile stops it at once (the file is
        removed) and is taken at this same safe point.

        The large buffers (arrays, tensors) are copied in memory when that fits comfortably
        (a copy is several times faster than a write): the file is then written by a thread
        while the program runs on, and None is returned (the thread reports). Otherwise the
        file is written whole before the program goes on."""
        for stream in (sys.stdout, sys.stderr):
            # What was printed before the checkpoint is out before it: a resume from it repeats
            # exactly the output that came after, never loses what came before.
            with contextlib.suppress(Exception):
                stream.flush()
        stdout_bytes, stderr_bytes = output_file_size(1), output_file_size(2)
        at = where(frame, self.context.user_code.is_user_code)
        started = time.monotonic()
        try:
            try:
                self._probing_until = float("inf")  # no budget: only a pause stops it
                result = take_snapshot(
                    frame, position, self.context, requested_time=wanted.requested
                )
                image = result.image
                held = None if image is None else _held_copy(image)
                size = 0 if image is None or held is not None else write_image(image, target)
            finally:
                self._probing_until = None
        except _ProbeStopped:
            target.unlink(missing_ok=True)
            return NotCheckpointed(reason="pause")
        except Exception as exc:  # a reducer that broke, a full disk: the program runs on
            target.unlink(missing_ok=True)
            return NotCheckpointed(reason="error", error=_error_text(exc))
        if result.image is None:
            if _waiting(result.problems):  # a later line will do: this periodic one waits
                self._probe_waits(wanted, result.problems, ready=result.ready)
                return None
            return NotCheckpointed(
                reason="problems", problems=[ProblemRecord(**p.to_dict()) for p in result.problems]
            )
        safe_point = result.image.header.safe_point_time
        taken = Checkpointed(
            checkpoint=str(target),
            bytes=size,
            stall_seconds=time.monotonic() - started,
            where=at,
            seconds_to_safe_point=max(0.0, safe_point - wanted.requested),
            stdout_bytes=stdout_bytes,
            stderr_bytes=stderr_bytes,
        )
        if held is None:
            return taken
        UnseenThread(self._write_held, held, target, taken)  # not among the program's threads
        return None

    def _group_checkpoint(
        self, frame: FrameType, position: Any, wanted: _ProbeWanted, group: PauseGroup
    ) -> None:
        """A periodic checkpoint of one rank of a multi-process job: agreed with the other
        ranks as a pause is, this rank's part written here (to its own part's path), and held
        at the safe point until the launcher has written the set (``checkpoint``: it runs on,
        and the launcher reports) or asked for the pause it now has (``pause``: the set is
        the pause's, and this process exits 75 as from a pause)."""
        deadline = wanted.deadline or self._clock() + _GROUP_AGREE_S
        if not group.agree(deadline):
            self._probe_waits(wanted, [], back_off=False)  # another line, while it lasts
            return
        group.drain()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        try:
            result = take_snapshot(frame, position, self.context, requested_time=wanted.requested)
        except Exception as exc:
            group.abort(_error_text(exc))
            self._notify(NotCheckpointed(reason="error", error=_error_text(exc)))
            return
        if result.image is None:
            group.abort("a value cannot be carried here")
            if _waiting(result.problems):
                self._probe_waits(wanted, result.problems, ready=result.ready)
            else:
                records = [ProblemRecord(**p.to_dict()) for p in result.problems]
                self._notify(NotCheckpointed(reason="problems", problems=records))
            return
        image = attrs.evolve(
            result.image,
            header=msgspec.structs.replace(result.image.header, rank=group.record()),
        )
        try:
            size = write_image(image, self.checkpoint_path, sync=False)  # the set is synced
        except Exception as exc:
            group.abort(_error_text(exc))
            self._notify(NotCheckpointed(reason="error", error=_error_text(exc)))
            return
        paused = Paused(
            checkpoint=str(self.checkpoint_path),
            bytes=size,
            paused_at=image.header.paused_at,
            seconds_to_safe_point=max(0.0, image.header.safe_point_time - wanted.requested),
            seconds_to_write=max(0.0, self._clock() - image.header.safe_point_time),
        )
        outcome = group.commit(msgspec.to_builtins(paused), deadline)
        if outcome == "pause":
            with self._lock:
                self._capturing = True
            self._notify(paused)
            self._exit_paused()

    def _write_held(self, image: CheckpointImage, target: Path, taken: Checkpointed) -> None:
        """The writer thread of a periodic checkpoint whose state was copied at its safe point."""
        try:
            size = write_image(image, target)
        except Exception as exc:
            target.unlink(missing_ok=True)
            self._notify(NotCheckpointed(reason="error", error=_error_text(exc)))
            return
        self._notify(msgspec.structs.replace(taken, bytes=size))

    def _probe_time_up(self) -> None:
        """Timer thread: wake the main thread so that its handler stops the walk."""
        if self._probing_until is not None and self.armed:
            signal.pthread_kill(self._main, WAKE_SIGNAL)  # type: ignore[arg-type]

    def _try_pause(self, frame: FrameType) -> None:
        try:
            self._try_pause_once(frame)
        finally:  # not paused (a pause exits): what was finished for it runs again
            remade.undo_before_pause(
                lambda message: print(f"portal: {message}", file=sys.stderr, flush=True)
            )

    def _try_pause_once(self, frame: FrameType) -> None:
        request = self._request
        if request is None:
            return
        now = self._clock()
        if now >= request.deadline:
            self._abandon_deadline(request)
            return
        if now < self._next_try and not _ready(self._ready):
            return
        self._ready = None
        position = check_position(frame, self.context)
        if isinstance(position, Problem) and position.type_name == PORTAL_AT_WORK:
            return  # a library line Portal's own code ran: the program is not here
        if isinstance(position, Problem):
            self._defer([position])
            self._listen_outside_obstacle(frame)
            return
        group = self._group
        if group is not None:
            if not group.agree(request.deadline):
                return  # a peer is inside the next collective (or no agreement): run on
            group.drain()
        # The safe point came before the pause's deadline: from here the pause is being taken,
        # and the deadline no longer abandons it. The deadline is when the program must reach a
        # safe point (the rest of the notice is kept for the saving); a state that takes long
        # to walk is still the job's best chance, where dropping it halfway kept nothing.
        with self._lock:
            if self._request is not request:
                return
            self._snapshotting = request
        try:
            result = take_snapshot(
                frame,
                position,
                self.context,
                requested_time=request.requested,
                history=list(self._history.values()),
                for_pause=True,
            )
        except Exception as exc:  # a bug or a reducer that broke: say so, keep the program alive
            message = f"taking the checkpoint failed: {type(exc).__name__}: {exc}"
            if group is not None:
                group.abort(message)
            self._fail(request, message)
            return
        finally:
            self._snapshotting = None
        if result.image is None:
            if group is not None:
                group.abort(
                    "a value cannot be carried here: "
                    + "; ".join(f"{p.name} ({p.reason})" for p in result.problems[:3])
                )
            self._defer(result.problems)
            if self._clock() >= request.deadline:  # no checkpoint, and no time left to try again
                self._abandon_deadline(request)
                return
            self._next_try = self._clock() + self._backoff
            self._backoff = min(self._backoff * 2, _BACKOFF_MAX)
            self._ready = result.ready
            if result.held is not None:
                self._listen_while_held(frame, result.held)
            return
        image = result.image
        if group is not None:
            image = attrs.evolve(
                image, header=msgspec.structs.replace(image.header, rank=group.record())
            )
        with self._lock:
            if self._request is not request:
                if group is not None:
                    group.abort("the pause was cancelled")
                return  # cancelled meanwhile
            self._capturing = True
        safe_point = image.header.safe_point_time
        try:
            # A rank's part needs no sync of its own: the set that holds it is synced whole.
            size = write_image(image, self.checkpoint_path, sync=group is None)
        except Exception as exc:
            with self._lock:
                self._capturing = False
            message = f"writing {self.checkpoint_path} failed: {_error_text(exc)}"
            if group is not None:
                group.abort(message)
            self._fail(request, message)
            return
        paused = Paused(
            checkpoint=str(self.checkpoint_path),
            bytes=size,
            paused_at=image.header.paused_at,
            seconds_to_safe_point=max(0.0, safe_point - request.requested),
            seconds_to_write=max(0.0, self._clock() - safe_point),
        )
        if (
            group is not None
            and group.commit(msgspec.to_builtins(paused), request.deadline) != "pause"
        ):
            # Another rank could not commit (or the set could not be written): every rank runs
            # on, and the pause is tried again at a later safe point while its deadline lasts.
            self.checkpoint_path.unlink(missing_ok=True)
            with self._lock:
                self._capturing = False
            self._next_try = self._clock() + self._backoff
            self._backoff = min(self._backoff * 2, _BACKOFF_MAX)
            return
        self._notify(paused)
        self._exit_paused()

    def _listen_outside_obstacle(self, frame: FrameType) -> None:
        """No line inside the outermost obstacle of ``frame``'s chain can be a safe point while
        it runs: narrow the line events to the frames outside it (see :mod:`.safepoint`), so
        that the pause is tried at the first line outside it and costs nothing meanwhile."""
        obstacle = outermost_obstacle(frame, self.context)
        if obstacle is not None and obstacle.f_back is not None:
            self._narrow(frame, obstacle.f_back)

    def _listen_while_held(self, frame: FrameType, held: HeldValues) -> None:
        """Line events only from the frame holding what failed and the frames outside it, each
        line asking whether it has let go (see :mod:`.held`): the program runs inside it at
        full speed, and the pause is tried at the first line after the value has left. A holder
        not on this stack leaves the tries to the timer, as before."""
        self._held = held if self._narrow(frame, held.holder) else None

    def _narrow(self, frame: FrameType, first_outer: FrameType) -> bool:
        """Line events only from ``first_outer`` and the frames outside it that have safe
        points; the frames from ``frame`` out to it lose theirs. False (nothing changed) when
        ``first_outer`` is not on ``frame``'s stack."""
        inner = []
        f: FrameType | None = frame
        while f is not None and f is not first_outer:
            inner.append(f)
            f = f.f_back
        if f is None:
            return False
        outer = []
        while f is not None:
            if self.context.has_safe_points(f.f_code):
                outer.append(f)
            f = f.f_back
        self._events.narrow(outer, inner)
        return True

    def _fail(self, request: _Request, message: str) -> None:
        with self._lock:
            if self._request is request:
                self._request = None
        self._notify(Failed(error=message))
        print(f"portal: {message}; the program continues", file=sys.stderr, flush=True)

    def _exit_paused(self) -> None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed stream cannot lose more output
                stream.flush()
        try:
            self._before_exit()
        finally:
            os._exit(EXIT_PAUSED)


def outside_portal(frame: FrameType | None, ctx: CaptureContext) -> FrameType | None:
    """The program's innermost frame at or outside ``frame``: the caller of the outermost
    frame of Portal's own code above the script's entry frame, else ``frame``.

    A signal may land while the main thread runs Portal's work between two of the program's
    bytecodes: the engine's line callback (a pending pause listens to every line), a library
    function it called (``os.path.realpath``), or another signal's handler (the control
    channel reading a pause on SIGIO). That frame is no obstacle of the program's, and line
    events belong on the program's frames, so the handlers look past it. Portal's code that
    runs inside the program's own calls (the import hook under torch's import) is the
    program's: the handlers look at its frames as at a library's."""
    program = frame
    f = frame
    while f is not None and not ctx.is_entry(f):
        if ctx.user_code.is_portal_file(f.f_code.co_filename):
            program = f.f_back
        f = f.f_back
    return program if f is not None else frame


def _ready(ready: Callable[[], bool] | None) -> bool:
    """A :class:`~portal.core.specs.WaitForSafePoint`'s ``ready``, asked at a line (never
    raising: a broken one counts as ready, and the walk then says what is wrong)."""
    if ready is None:
        return False
    try:
        return bool(ready())
    except Exception:
        return True


def _waiting(problems: Sequence[Problem]) -> bool:
    """Whether ``problems`` only say "not at this line" (positions, values needing a later
    line): a walk then waits for a later safe point instead of reporting them."""
    return bool(problems) and all(p.kind == "position" for p in problems)


def output_file_size(fd: int) -> int | None:
    """The size of the regular file behind ``fd`` (the node's attempt output), else None."""
    try:
        info = os.fstat(fd)
    except OSError:
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None
