"""The program's own threads, carried as the main thread is: a worker parked where it waits
(``queue.get()``, also as ``for item in iter(q.get, None)``, ``queue.put()`` on a full queue,
``event.wait()``, ``semaphore.acquire()``, ``cond.wait()`` or ``cond.wait_for(predicate)`` in
its own ``with cond:``, ``time.sleep(seconds)``) travels as its frames, and is started again at
the resume in that wait, with the queue's items, so that it continues.

A class of the program's with a worker thread draining a queue is the shape this serves: its
thread spends its life in ``q.get()``. At a pause the main thread stands at a safe point of its
own; a worker of the program's stands inside a wait of the standard library's, blocked on a
lock in C. What it would do next depends only on its frames (its target's, and those its
target called) and on the wait's arguments, both of which are values. So a thread *parked* at
the pause, its waiter still in the condition's list (not notified, not timed out), travels as:

* its frames from its target (or its ``run`` method) in to the frame that called the wait,
  read as the main thread's are (:func:`portal.capture.snapshot._record`), each continuing
  where the call it waits on returns;
* the wait itself, as a ``functools.partial`` of the library's function and the arguments its
  frame still holds (a wait changes none of them before it blocks): done again from its start
  at the resume, its return value landing where the first one's would have. A timeout starts
  again from its full length. A condition's wait is done again with the lock taken first (the
  program's ``with`` block held it), and the resume goes on once the thread waits again, so
  that no ``notify`` is lost (a bare ``cond.wait()`` does not look whether its event has come).
  A ``time.sleep(seconds)`` the program's frame calls is a call into C, with no frame of its
  own: the frame is read standing in that call (:func:`portal.capture.frames.c_call`), and the
  sleep is done again, whole, at the resume. A ``for`` loop over ``iter(q.get, None)`` calls
  the wait from its ``FOR_ITER`` through C that holds only the callable and the sentinel
  (:func:`portal.capture.frames.callable_iteration`): the frame is resumed at that
  ``FOR_ITER``, the iterator on its stack, which calls the wait again.

The ``Thread`` object (wherever the program keeps it: ``self._worker``, a global) travels as
a new, unstarted ``Thread`` of its class, its name, its daemon flag and the attributes a
subclass added; once the restore is done it is started, its ``run`` the resumed frames. The
queue or event it waited on travels without the waiter (its new condition starts with none),
as for a re-made object's worker (:mod:`portal.capture.remade`).

The frames are read before the rest of the state is pickled, and the main thread may let go of
the GIL meanwhile (a file read by an extension): a thread whose wait ends then (a timeout, a
notify) runs on, and what it changes would be pickled after its frames were read. So each
carried thread must still stand in its wait once the pickle is done (:func:`moved`), or the
checkpoint is dropped and the pause tries again at a later line. A condition's waiter leaves
its mark in the condition's list of waiters; one whose wait times out meanwhile is held back
before it leaves the list (:mod:`portal.capture.holdback`), so that a poller that wakes more
often than the state takes to pickle does not make every try start again. A sleep leaves no
mark of its own (a thread that slept, ran and slept again looks the same): the thread is held
at the first line after its sleep, and its mark is that it stands there, or that its CPU time
has not grown since it was read (Linux's per-thread CPU clock; where there is none, a sleeping
thread is one that runs).

A thread of the program's that is *not* parked (it runs its own lines, or a wait this module
does not know) cannot be read: its frames change under the reader. Where a value refers to its
``Thread`` object, the pause waits a few lines for it to park
(:class:`~portal.core.specs.WaitForSafePoint`); one that no value refers to is not carried, and
does not run after the resume. Library threads (a writer's, a loader's) are no business of this
module: their objects are re-made or refused by type.

The rebuild function's name is part of the checkpoint format: do not rename it.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import CodeType, FrameType
from typing import Any, Final, NamedTuple

from portal.capture import frames as _frames
from portal.capture.holdback import SleepMark, conditions_held, quiet_after, sleepers_held
from portal.capture.problems import where
from portal.core.specs import WaitForSafePoint

#: ``portal.capture.snapshot``'s ``CaptureContext`` and ``FrameRecord``: that module reads
#: threads through this one, so this one names them without importing it (no import cycle).
CaptureContext = Any
FrameRecord = Any

__all__ = [
    "CarriedThreads",
    "ThreadRecord",
    "carrying",
    "find_threads",
    "is_carried",
    "moved",
    "rebuild_thread",
    "reduce_thread",
]


class ThreadRecord(NamedTuple):
    """One parked thread of the program's, as it travels."""

    thread: threading.Thread
    frames: list[FrameRecord]  # outermost (its target, or its run method) first
    #: The wait it stood in, done again at the resume; None where the innermost frame does its
    #: own instruction again (the ``FOR_ITER`` of ``for x in iter(q.get, None)``).
    wait: functools.partial[Any] | None


class CarriedThreads(NamedTuple):
    """What :func:`find_threads` read: the parked threads, and the program's threads that run."""

    records: list[ThreadRecord]
    live_frames: list[list[FrameType]]  # each record's frames, innermost first (diagnosis)
    busy: dict[int, str]  # id(thread) -> where it runs
    #: For each record, whether the thread still waits as it was read: true after the pickle
    #: only if it never woke meanwhile (:func:`moved`).
    marks: list[Callable[[], bool]]
    #: The conditions the carried threads wait on: each holds back a waiter whose wait times
    #: out while the state is pickled (:func:`carrying`).
    conditions: list[threading.Condition]
    #: The carried sleepers that can be held after their sleep: ident, frame, mark.
    sleepers: list[tuple[int, FrameType, SleepMark]]


def _waits() -> dict[int, Callable[..., Any]]:
    """The waits a parked thread may stand in, by the ``id`` of their code (a resumed frame's
    code holds cells among its constants, and a code object's hash hashes them: unhashable;
    these codes live as long as their modules), each with what does it again at
    the resume (whole: each changes nothing before it blocks). A condition's ``wait`` and
    ``wait_for`` are called inside the program's own ``with cond:``, holding the lock they let
    go of while they wait: done again by :func:`_wait_again` and :func:`_wait_for_again`, which
    take it first. Those two stand for themselves too: a thread resumed once waits in them."""
    found: dict[int, Callable[..., Any]] = {}
    for owner in (
        getattr(sys.modules.get("queue"), "Queue", None),
        getattr(sys.modules.get("threading"), "Event", None),
        getattr(sys.modules.get("threading"), "Semaphore", None),
    ):
        if owner is None:
            continue
        for name in ("get", "put", "wait", "acquire"):
            function = owner.__dict__.get(name)
            if function is not None:
                found[id(function.__code__)] = function
    condition = threading.Condition
    for function, again in (
        (condition.wait, _wait_again),
        (condition.wait_for, _wait_for_again),
        (_wait_again, _wait_again),
        (_wait_for_again, _wait_for_again),
    ):
        found[id(function.__code__)] = again
    return found


def _wait_again(self: threading.Condition, timeout: float | None = None) -> bool:
    """``cond.wait(timeout)`` done again at the resume: the lock the program's ``with cond:``
    held before the wait let it go is taken first (the carried lock is free), as the wait
    takes it again before it returns. :func:`start` lets the program run on only once the
    thread waits, so that no ``notify`` of the main thread's comes before it and is lost."""
    self.acquire()
    return self.wait(timeout)


def _wait_for_again(
    self: threading.Condition, predicate: Callable[[], Any], timeout: float | None = None
) -> Any:
    """``cond.wait_for(predicate, timeout)`` done again at the resume, the lock taken first
    (:func:`_wait_again`); the predicate is asked first, as ``wait_for`` does."""
    self.acquire()
    return self.wait_for(predicate, timeout)


def _is_threading(frame: FrameType | None) -> bool:
    return frame is not None and frame.f_globals is threading.__dict__


def find_threads(
    ctx: CaptureContext,
    namespaces: Mapping[int, str],
    record: Callable[..., FrameRecord],
) -> CarriedThreads:
    """Read every parked thread of the program's (see the module docstring); ``record`` reads
    one frame as :func:`portal.capture.snapshot._record` does. Runs on the main thread, which
    holds the GIL from the first read to the last: no thread moves meanwhile."""
    records: list[ThreadRecord] = []
    live: list[list[FrameType]] = []
    busy: dict[int, str] = {}
    marks: list[Callable[[], bool]] = []
    conditions: list[threading.Condition] = []
    sleepers: list[tuple[int, FrameType, SleepMark]] = []
    current = threading.current_thread()
    waits: dict[int, Callable[..., Any]] | None = None
    condition_wait = threading.Condition.wait.__code__
    for ident, innermost in sys._current_frames().items():
        thread = threading._active.get(ident)  # type: ignore[attr-defined]
        if thread is None or thread is current or thread is threading.main_thread():
            continue
        entry = _entry_frame(innermost)
        if entry is None or id(entry.f_globals) not in namespaces:
            continue  # a library's thread, or Portal's: none of this module's business
        if not ctx.user_code.is_user_code(entry.f_code):
            continue
        if waits is None:
            waits = _waits()
        parked = _parked(innermost, condition_wait, waits, ctx, namespaces)
        if parked is None:
            parked = _asleep(innermost, ident, ctx, namespaces)
        if parked is None:
            busy[id(thread)] = where(innermost, ctx.user_code.is_user_code)
            continue
        chain = parked.chain
        frame_records = [
            record(f, chain[i - 1], ctx, namespaces)
            if i
            else record(f, parked.library, ctx, namespaces, parked.below, again=parked.wait is None)
            for i, f in enumerate(chain)
        ]
        frame_records.reverse()
        records.append(ThreadRecord(thread, frame_records, parked.wait))
        live.append(chain)
        marks.append(parked.mark)
        if parked.cond is not None:
            conditions.append(parked.cond)
        if parked.sleeping is not None:
            sleepers.append((ident, *parked.sleeping))
    return CarriedThreads(records, live, busy, marks, conditions, sleepers)


def moved(found: CarriedThreads) -> str | None:
    """The name of a carried thread that woke while the state was pickled (its wait timed
    out, or another thread notified it: the main thread may let go of the GIL while it
    pickles), whose frames, read before, no longer match the objects pickled after: the
    checkpoint is not whole, and the pause tries again. None when every one still waits.
    A waiter still in its condition's list has run no line since (it leaves the list under
    the GIL, before it returns from the wait); a sleeper whose CPU time has not grown has not
    run at all."""
    for record, still in zip(found.records, found.marks, strict=True):
        if not still():
            return record.thread.name
    return None


def _entry_frame(innermost: FrameType) -> FrameType | None:
    """The outermost frame of the thread's that ``threading`` (or this module's resumed ``run``)
    called: its target, or its ``run`` method. None for a thread not started by ``threading``."""
    f: FrameType | None = innermost
    while f is not None:
        caller = f.f_back
        if not _is_threading(f) and (_is_threading(caller) or _is_resumed_run(caller)):
            return f
        f = caller
    return None


def _is_resumed_run(frame: FrameType | None) -> bool:
    return frame is not None and frame.f_code is _resumed_run_code


class _Parked(NamedTuple):
    """How a parked thread stands, as :func:`_parked` read it (once)."""

    chain: list[FrameType]  # its frames of the program's, innermost first
    #: The wait, done again at the resume; None: the innermost frame's ``FOR_ITER`` is.
    wait: functools.partial[Any] | None
    library: FrameType | None  # the wait's frame, which the innermost of ``chain`` waits on
    mark: Callable[[], bool]  # whether it still waits as read (:func:`moved`)
    #: A wait in C: the innermost frame's stack below the call (or, at a ``FOR_ITER``, its
    #: whole stack, the iterator on top).
    below: int | None = None
    cond: threading.Condition | None = None  # the condition it waits on (:func:`carrying`)
    #: Its frame in a sleep after which it can be held, and its mark there
    #: (:mod:`portal.capture.holdback`).
    sleeping: tuple[FrameType, SleepMark] | None = None


def _parked(
    innermost: FrameType,
    condition_wait: CodeType,
    waits: Mapping[int, Callable[..., Any]],
    ctx: CaptureContext,
    namespaces: Mapping[int, str],
) -> _Parked | None:
    """How the thread stands, when it is blocked in a known wait called from the program's
    code; None otherwise."""
    if innermost.f_code is not condition_wait:
        return None
    local = innermost.f_locals
    cond = local.get("self")
    waiter = local.get("waiter")
    if waiter is None or not _still_waits(cond, waiter):
        return None  # notified, timed out, or not yet waiting: it runs
    if "saved_state" not in local or not _held_once(local["saved_state"]):
        return None  # it holds the lock still, or held it more than once (done again: once)
    library = innermost  # the outermost of the waits that call each other in
    while library.f_back is not None and id(library.f_back.f_code) in waits:
        library = library.f_back
    caller = library.f_back
    if caller is None:
        return None
    mark = functools.partial(_still_waits, cond, waiter)
    if not _frames.reaches(library, caller):
        # ``for x in iter(q.get, None)``: the frame's FOR_ITER calls the wait again, whole.
        depth = _frames.callable_iteration(library, caller)
        chain = None if depth is None else _program_chain(caller, ctx, namespaces)
        if chain is None:
            return None
        return _Parked(chain, None, None, mark, depth, cond)
    function = waits[id(library.f_code)]
    code = library.f_code
    names = code.co_varnames[: code.co_argcount]
    values = library.f_locals
    if any(name not in values for name in names):
        return None
    wait = functools.partial(function, *(values[name] for name in names))
    chain = _program_chain(caller, ctx, namespaces)
    if chain is None:
        return None
    return _Parked(chain, wait, library, mark, cond=cond)


def _still_waits(cond: Any, waiter: Any) -> bool:
    return any(w is waiter for w in getattr(cond, "_waiters", ()))


def _asleep(
    innermost: FrameType, ident: int, ctx: CaptureContext, namespaces: Mapping[int, str]
) -> _Parked | None:
    """How the thread stands when its innermost frame, the program's, stands in ``time.sleep``
    (:func:`portal.capture.frames.c_call`); None otherwise. A sleep leaves no mark of its own,
    so the thread's CPU time is read first: it grows the moment the thread wakes, and
    :func:`moved` compares it after the pickle. Where no thread's CPU clock can be read (not
    Linux), a sleeping thread is one that runs."""
    clock = _cpu_clock(ident)
    if clock is None:
        return None
    before = time.clock_gettime_ns(clock)
    if id(innermost.f_globals) not in namespaces or not ctx.has_safe_points(innermost.f_code):
        return None
    call = _frames.c_call(innermost, _is_sleep)
    if call is None:
        return None
    if isinstance(call.target, functools.partial):
        if call.args:
            return None
        wait = call.target  # resumed once: its sleep again
    else:
        wait = functools.partial(_SLEEP, *call.args)  # type: ignore[arg-type]
    chain = _program_chain(innermost, ctx, namespaces)
    if chain is None:
        return None
    mark = SleepMark(clock, before)
    quiet = quiet_after(innermost, _frames.c_call_continuation(innermost))
    return _Parked(
        chain, wait, None, mark, call.below, sleeping=(innermost, mark) if quiet else None
    )


#: ``time.sleep`` as the interpreter made it (a program may put another in its place).
_SLEEP: Final = time.sleep


def _is_sleep(target: object) -> bool:
    """``time.sleep``, or a ``functools.partial`` of it with its seconds (a thread resumed
    once sleeps through one)."""
    if type(target) is functools.partial:
        return target.func is _SLEEP and not target.keywords
    return target is _SLEEP


def _cpu_clock(ident: int | None) -> int | None:
    """The CPU-time clock of the thread ``ident`` (Linux), or None."""
    clock_of = getattr(time, "pthread_getcpuclockid", None)
    if clock_of is None or ident is None:
        return None
    try:
        return int(clock_of(ident))
    except OSError:
        return None


def _program_chain(
    first: FrameType, ctx: CaptureContext, namespaces: Mapping[int, str]
) -> list[FrameType] | None:
    """The thread's frames from ``first`` out to its entry, innermost first, when each is the
    program's, with safe points, and waits on the one inside it with no state in C between;
    None otherwise."""
    chain: list[FrameType] = []
    f: FrameType | None = first
    while f is not None:
        if id(f.f_globals) not in namespaces or not ctx.has_safe_points(f.f_code):
            return None
        chain.append(f)
        outer = f.f_back
        if _is_threading(outer) or _is_resumed_run(outer):
            return chain
        if outer is None or not _frames.reaches(f, outer):
            return None
        f = outer
    return None


def _held_once(saved_state: object) -> bool:
    """Whether the waiting thread held the condition's lock once when it let it go: an
    ``RLock``'s saved state is its count and owner, a ``Lock``'s is None."""
    return saved_state is None or (isinstance(saved_state, tuple) and saved_state[:1] == (1,))


# -- the Thread objects -----------------------------------------------------------------------

_CARRIED: dict[int, threading.Thread] = {}
_BUSY: dict[int, str] = {}
_INTERNAL: frozenset[str] | None = None


@contextmanager
def carrying(
    ctx: CaptureContext, namespaces: Mapping[int, str], record: Callable[..., FrameRecord]
) -> Iterator[CarriedThreads]:
    """Read the threads (:func:`find_threads`, whose arguments these are) and, until the block
    ends (:func:`moved` has said whether the pickle may be kept): these threads travel, those
    run (:func:`reduce_thread`), and a carried thread whose wait ends meanwhile is held back
    before it runs a line of its own (:mod:`portal.capture.holdback`: a condition's waiter at
    the end of its wait, a sleeper at its next line).

    From the first read until both stand, the interpreter switches threads less often
    (:data:`_READING_S`), once every thread that waited for the GIL has had it: a sleeper whose
    sleep of a few milliseconds ends while the threads are read then waits for the GIL, having
    run nothing, and is held at the first line it reaches (otherwise it would run before it
    could be held, and every try start again). A sleeper's CPU time grows as it wakes, so that
    alone cannot tell this apart from a thread that ran: where the reading took longer than
    half that interval, the sleepers are not held, and their CPU time is their mark."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(max(interval, _READING_S))
    try:
        if threading.active_count() > 1:
            time.sleep(_FLUSH_S)  # a thread that waits for the GIL now runs before the reading
        started = time.monotonic()
        found = find_threads(ctx, namespaces, record)
        if time.monotonic() - started > _READING_S / 2:
            found = found._replace(sleepers=[])  # read too slowly to be sure none ran
        _CARRIED.update({id(r.thread): r.thread for r in found.records})
        _BUSY.update(found.busy)
        with conditions_held(found.conditions), sleepers_held(found.sleepers):
            sys.setswitchinterval(interval)
            yield found
    finally:
        sys.setswitchinterval(interval)
        _CARRIED.clear()
        _BUSY.clear()


#: The switch interval while the threads are read and held (see :func:`carrying`): long next
#: to that reading (milliseconds), short enough that a thread that takes the GIL meanwhile
#: (the main thread let go of it) keeps it from the reader no longer than this.
_READING_S: Final = 0.1
#: How long the GIL is let go before the reading, for the threads that wait for it.
_FLUSH_S: Final = 0.001


def is_carried(thread: object) -> bool:
    """Whether ``thread`` travels with the checkpoint being taken (started again in its wait)."""
    return _CARRIED.get(id(thread)) is thread


def _internal_keys() -> frozenset[str]:
    """The attributes ``threading.Thread.__init__`` sets: the thread's, not the program's."""
    global _INTERNAL
    if _INTERNAL is None:
        _INTERNAL = frozenset(vars(threading.Thread(name="portal-probe")))
    return _INTERNAL


def reduce_thread(thread: threading.Thread) -> Any:
    """A carried thread travels as a new one of its class (see the module docstring); one of
    the program's that runs makes the pause wait; None for any other (the pickler refuses it,
    with the way out)."""
    if is_carried(thread):
        internal = _internal_keys()
        state = {k: v for k, v in vars(thread).items() if k not in internal and k != "run"}
        return (rebuild_thread, (type(thread), thread.name, thread.daemon, state))
    running = _BUSY.get(id(thread))
    if running is not None:
        raise WaitForSafePoint(
            f"thread {thread.name!r} runs its own code ({running}), or waits where no pause "
            "can read it (a lock, a socket, a join); the pause waits until it stands in a "
            "queue's get or put, an event's wait, a semaphore's acquire, a condition's wait "
            "or wait_for, or time.sleep, and carries it there",
            ready=functools.partial(_in_a_wait, thread.ident),
        )
    return None  # not the program's to carry: refused as any object of the process is


def _in_a_wait(ident: int | None) -> bool:
    """Cheap, for each line of a pending pause: whether the thread stands in a condition's
    wait or a sleep now (a try then reads it whole), or has ended."""
    frame = sys._current_frames().get(ident) if ident is not None else None
    return (
        frame is None
        or frame.f_code is threading.Condition.wait.__code__
        or _frames.c_call(frame, _is_sleep) is not None
    )


def rebuild_thread(
    cls: type[threading.Thread], name: str, daemon: bool, state: dict[str, Any]
) -> threading.Thread:
    """A new, unstarted thread of ``cls`` with the carried name, daemon flag and attributes;
    :func:`start` gives it its resumed frames."""
    thread = cls.__new__(cls)
    threading.Thread.__init__(thread, name=name, daemon=daemon)
    thread.__dict__.update(state)
    return thread


def start(record: ThreadRecord, entry: Callable[[], Any]) -> None:
    """Start a carried thread again: its ``run`` is ``entry``, the resumed function of its
    outermost frame, whose frames call the wait again (:func:`portal.capture.resume.build_thread`)."""
    thread = record.thread
    thread.run = functools.partial(_resumed_run, thread, entry)  # type: ignore[method-assign]
    thread.start()
    if record.wait is not None and record.wait.func is _wait_again:
        _until_waiting(thread, record.wait.args[0])


def _waits_on(frame: FrameType | None, wait: CodeType, cond: object) -> bool:
    """Whether ``frame`` is a ``Condition.wait`` of ``cond`` past letting go of its lock."""
    if frame is None or frame.f_code is not wait:
        return False
    local = frame.f_locals
    return local.get("self") is cond and "saved_state" in local


def _outwards(frame: FrameType | None) -> Iterator[FrameType]:
    while frame is not None:
        yield frame
        frame = frame.f_back


#: The longest a resume waits for a thread started again in a condition's wait to stand in it.
_SETTLE_S = 2.0


def _until_waiting(thread: threading.Thread, cond: object) -> None:
    """Return once ``thread`` waits on ``cond`` again, or has left :func:`_wait_again` (a
    timeout, another thread's notify), or ended: a bare ``cond.wait()`` does not ask whether
    what it waits for has come, so a ``notify`` sent before it waits again would be lost. At
    most :data:`_SETTLE_S` (the lock may be another's a while)."""
    wait, again = threading.Condition.wait.__code__, _wait_again.__code__
    entered = False
    end = time.monotonic() + _SETTLE_S
    while thread.is_alive() and time.monotonic() < end:
        frame = sys._current_frames().get(thread.ident or -1)
        if _waits_on(frame, wait, cond):
            return  # in the list of waiters, the lock let go
        inside = any(f.f_code is again for f in _outwards(frame))
        if entered and not inside:
            return
        entered = entered or inside
        time.sleep(0.0005)


def _resumed_run(thread: threading.Thread, entry: Callable[[], Any]) -> None:
    """The carried thread's ``run``: its own again at once (a later pause reads its class's)."""
    del thread.run
    entry()


_resumed_run_code = _resumed_run.__code__
