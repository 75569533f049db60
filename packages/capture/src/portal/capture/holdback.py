"""Hold back a carried thread of the program's whose wait ends while a checkpoint is taken,
before it runs a line of its own, until the checkpoint is taken.

A thread carried in its wait (:mod:`portal.capture.threads`) has its frames read before the
rest of the state is pickled. A poller that waits 2 ms at a time (``stop.wait(0.002)``,
``q.get(timeout=...)``, ``time.sleep(1)`` in a monitor that logs GPU use, beside a state that
takes seconds to pickle) wakes meanwhile, and once it has run a line of its own, what it
changed no longer matches the frames read before: the checkpoint would be dropped and the
pause would try again, for ever. So it is held where its wait ends; its mark (what
:func:`portal.capture.threads.moved` asks) still says it waits, and the resume does the wait
again, whole, as one whose end had not come.

* A condition's waiter (a queue's, an event's, a semaphore's, a condition's own) is held at the
  end of ``Condition.wait``, before it takes the lock again and leaves the list of waiters
  (:func:`conditions_held`).
* A sleep has no Python frame of its own to be held in. The thread is held at the next event
  the interpreter reports for it (:func:`sleepers_held`): on 3.11, through a trace function set
  on *its* thread state (the C API's ``_PyEval_SetTrace``, which takes any thread's state;
  ``sys.settrace`` only sets the calling thread's); on 3.12+, through a ``sys.monitoring`` tool
  of its own, local to the sleeping frame's code, whose callback lets every other thread pass.
  What the thread runs between its sleep's end and that event is the rest of the sleep's line
  (its ``POP_TOP``, the loop's jump back). So a thread is held only where that rest changes
  nothing (:func:`quiet_after`): a line ``time.sleep(0.05); n += 1`` is not, and such a thread
  is left to the CPU-time mark alone (:class:`SleepMark`).
"""

from __future__ import annotations

import _thread
import ctypes
import dis
import functools
import operator
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from types import CodeType, FrameType
from typing import Any, Final

__all__ = ["SleepMark", "conditions_held", "quiet_after", "sleepers_held"]

#: What the rest of a sleep's line may do for the thread to be held after it: nothing the
#: program could see (the call's result dropped, a jump, the caches between).
_QUIET: Final = frozenset(
    dis.opmap[name]
    for name in (
        "POP_TOP",
        "NOP",
        "CACHE",
        "JUMP_FORWARD",
        "JUMP_BACKWARD",
        "JUMP_BACKWARD_NO_INTERRUPT",
        "EXTENDED_ARG",
    )
    if name in dis.opmap
)

#: How long the mark gives a thread that has woken to reach the gate (it waits for the GIL).
_REACH_S: Final = 0.05


class SleepMark:
    """A carried sleeper's mark (:func:`portal.capture.threads.moved`): true while the thread has
    run nothing of its own since it was read. Its CPU time has not grown (it never woke), or it
    stands held at the gate (:func:`sleepers_held`), where it arrived with nothing run but the quiet
    rest of its line. A thread that woke and waits for the GIL is given a moment to arrive."""

    __slots__ = ("arrived", "before", "clock", "held")

    def __init__(self, clock: int, before: int) -> None:
        self.clock = clock
        self.before = before
        self.held = False  # a gate stands in its way (:func:`sleepers_held`)
        self.arrived = False  # it stands at that gate

    def not_run(self) -> bool:
        try:
            return time.clock_gettime_ns(self.clock) == self.before
        except OSError:
            return False  # it ended

    def __call__(self) -> bool:
        if self.arrived or self.not_run():
            return True
        if self.held:
            end = time.monotonic() + _REACH_S
            while not self.arrived and time.monotonic() < end:
                time.sleep(0.001)  # lets go of the GIL, which it waits for
        return self.arrived


def quiet_after(frame: FrameType, continuation: int) -> bool:
    """Whether everything ``frame``'s code does from ``continuation`` (where it goes on after its
    sleep) to the end of the sleep's line is in :data:`_QUIET`."""
    code = frame.f_code
    raw = code.co_code
    lines = [position[0] for position in code.co_positions()]
    here = frame.f_lasti // 2
    if here >= len(lines) or lines[here] is None:
        return False
    line = lines[here]
    unit = continuation // 2
    while unit < len(lines) and lines[unit] == line:
        if raw[2 * unit] not in _QUIET:
            return False
        unit += 1
    return True


@contextmanager
def conditions_held(conditions: Iterable[threading.Condition]) -> Iterator[None]:
    """Hold back, until the block ends, each thread whose wait on one of ``conditions`` times
    out meanwhile, before it takes the lock again and leaves the list of waiters.

    A poller that waits 20 ms at a time (``stop.wait(0.02)``, ``q.get(timeout=0.02)``) would
    otherwise wake and run while a state that takes longer than that to pickle is pickled, so
    that its frames, read before, no longer matched, and every try of the pause started again
    until its deadline. Held here, it has run no line of its own since its frames were read,
    and its waiter is still in the list (the checkpoint is kept); the resume does the wait
    again, whole, as a timeout that had not come. ``Condition.wait`` takes the lock
    again through ``self._acquire_restore``, looked up on the condition when it wakes: for the
    block, the condition's own attribute puts a gate before it. A thread notified meanwhile
    leaves the list before it meets the gate (another's notify: it has work, and the pause
    tries again). Nothing here blocks the main thread, which never takes these locks."""
    gate = _thread.allocate_lock()
    gate.acquire()
    gated: list[tuple[dict[str, Any], Any]] = []
    try:
        for cond in {id(c): c for c in conditions}.values():
            if type(cond) is not threading.Condition:
                continue  # a subclass may take its lock again its own way
            own = vars(cond)
            restore = cond._acquire_restore  # type: ignore[attr-defined]
            gated.append((own, own.get("_acquire_restore", _ABSENT)))
            own["_acquire_restore"] = functools.partial(_through_gate, gate, restore)
        yield
    finally:
        for own, previous in gated:
            if previous is _ABSENT:
                own.pop("_acquire_restore", None)
            else:
                own["_acquire_restore"] = previous
        gate.release()  # every thread held back goes on


_ABSENT: Final = object()


def _through_gate(gate: Any, restore: Callable[[Any], Any], saved_state: Any) -> Any:
    """A woken waiter's way back into its lock while :func:`conditions_held` holds it back."""
    with gate:
        pass
    return restore(saved_state)


@contextmanager
def sleepers_held(sleepers: Sequence[tuple[int, FrameType, SleepMark]]) -> Iterator[None]:
    """For the block: each of ``sleepers`` (its thread's ident, its sleeping frame, its mark) is
    held at the first event after its sleep ends, until the block ends. Where the interpreter
    offers no way in, nothing is held (the marks alone tell).

    The caller sees to it that no sleeper has run a line since it was read: one may have woken
    (its CPU time grows) and wait for the GIL, which the reader kept
    (:func:`portal.capture.threads.carrying`); it arrives at the gate once it has it."""
    if not sleepers:
        yield
        return
    gate = _thread.allocate_lock()
    gate.acquire()
    by_ident = {ident: mark for ident, _, mark in sleepers}

    def arrive() -> None:
        mark = by_ident.get(threading.get_ident())
        if mark is None or not mark.held:
            return
        mark.arrived = True
        with gate:
            pass

    undo: Callable[[], None] = _nothing
    try:
        if sys.version_info >= (3, 12):
            undo = _monitor(sleepers, arrive)
        else:
            undo = _trace(sleepers, arrive)
        yield
    finally:
        try:
            undo()
        finally:
            gate.release()  # every thread held goes on


def _nothing() -> None:
    return None


# -- 3.12+: a sys.monitoring tool of its own ------------------------------------------------

#: The events after a sleep that hold the thread: its next line, a jump (a loop's way back to
#: the same line fires no line event), a return, a call.
_EVENTS: Final = ("LINE", "JUMP", "BRANCH", "PY_RETURN", "CALL")


def _monitor(
    sleepers: Sequence[tuple[int, FrameType, SleepMark]], arrive: Callable[[], None]
) -> Callable[[], None]:
    monitoring: Any = getattr(sys, "monitoring", None)
    tool = next((t for t in (5, 4, 3, 2) if monitoring.get_tool(t) is None), None)
    if tool is None:
        return _nothing
    events = [getattr(monitoring.events, name) for name in _EVENTS]
    wanted = functools.reduce(operator.or_, events)

    def callback(*_: object) -> Any:
        arrive()
        return None

    monitoring.use_tool_id(tool, "portal-held-sleepers")
    for event in events:
        monitoring.register_callback(tool, event, callback)
    codes: dict[int, CodeType] = {}
    for _, frame, mark in sleepers:
        mark.held = True
        codes[id(frame.f_code)] = frame.f_code
        monitoring.set_local_events(tool, frame.f_code, wanted)

    def undo() -> None:
        for code in codes.values():
            monitoring.set_local_events(tool, code, 0)
        for event in events:
            monitoring.register_callback(tool, event, None)
        monitoring.free_tool_id(tool)

    return undo


# -- 3.11: a trace function on the sleeping thread's own state -------------------------------

_TRACE_FUNC: Final = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p
)


@functools.cache
def _api(name: str, restype: Any, *argtypes: Any) -> Any:
    """A C API function of the interpreter's, typed here (``ctypes.pythonapi``'s own objects are
    shared with every other user of it: their types are not set here)."""
    return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


def _thread_states() -> dict[int, int]:
    """The address of each thread's state, by the ``id`` of the frame it runs (under the GIL)."""
    main = _api("PyInterpreterState_Main", ctypes.c_void_p)
    head = _api("PyInterpreterState_ThreadHead", ctypes.c_void_p, ctypes.c_void_p)
    following = _api("PyThreadState_Next", ctypes.c_void_p, ctypes.c_void_p)
    frame_of = _api("PyThreadState_GetFrame", ctypes.py_object, ctypes.c_void_p)
    found: dict[int, int] = {}
    state = head(main())
    while state:
        try:
            frame = frame_of(state)
        except ValueError:  # no frame: a thread not running Python
            frame = None
        if frame is not None:
            found[id(frame)] = state
        state = following(state)
    return found


def _set_trace(state: int, func: Any, arg: int | None) -> None:
    _api("_PyEval_SetTrace", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
        state, func, arg
    )


def _trace(
    sleepers: Sequence[tuple[int, FrameType, SleepMark]], arrive: Callable[[], None]
) -> Callable[[], None]:
    global _ARRIVE
    if not hasattr(ctypes.pythonapi, "_PyEval_SetTrace") or threading.gettrace() is not None:
        return _nothing  # threads traced by a tool (coverage, a debugger): theirs, untouched
    _ARRIVE = arrive
    states = _thread_states()
    traced: list[tuple[int, SleepMark]] = []
    current = sys._current_frames()
    for ident, frame, mark in sleepers:
        state = states.get(id(frame)) if current.get(ident) is frame else None
        if state is not None and frame.f_trace is None:  # one traced by its own: left alone
            mark.held = True
            _set_trace(state, _TRACED, None)
            traced.append((state, mark))

    def undo() -> None:
        alive = set(_thread_states().values())
        for state, mark in traced:
            if state in alive and not mark.arrived:
                _set_trace(state, None, None)

    return undo


def _traced(obj: int | None, frame: int | None, what: int, arg: int | None) -> int:
    """The trace function of a held sleeper's thread (3.11): its first event, once its sleep
    has ended. It takes itself off, and waits at the gate."""
    try:
        _set_trace(_api("PyThreadState_Get", ctypes.c_void_p)(), None, None)
        _ARRIVE()
    except BaseException:  # nothing may escape into the interpreter
        pass
    return 0


_ARRIVE: Callable[[], None] = _nothing
#: Made once, and kept for the life of the process: a thread may still be inside it.
_TRACED: Final = _TRACE_FUNC(_traced)
