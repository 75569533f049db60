"""Taking a program's state at a safe point: the frame chain, the namespaces, one pickle.

Called on the paused thread, from inside a line event. :func:`check_position` answers cheaply
whether the pause may be taken here (the chain of frames); :func:`take_snapshot` then reads every
frame of the chain, the user namespaces and the capture extensions' state, and pickles them all
at once, so shared references stay shared. If pickling fails, :func:`diagnose` walks the same
state part by part to name each value that cannot be carried.
"""

from __future__ import annotations

import inspect
import os
import sys
import time
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import CodeType, FrameType
from typing import Any, NamedTuple, Protocol, cast

import cloudpickle

from portal.capture import frames as _frames
from portal.capture import remade
from portal.capture.alignment import remainder_of
from portal.capture.codegen import NULL
from portal.capture.held import HeldSlot, HeldValues
from portal.capture.image import (
    CheckpointImage,
    Header,
    InterpreterInfo,
    ModuleRef,
    ProblemRecord,
)
from portal.capture.libraries import describe_all, library_namespaces
from portal.capture.namespaces import GlobalsFirst
from portal.capture.pickler import (
    NamespaceRef,
    Reducer,
    dumps,
    iter_children,
    pickle_error,
    resolve_reducers,
)
from portal.capture.problems import Problem, describe_type, where
from portal.capture.progressive import global_places
from portal.capture.restoring import ResumedInfo
from portal.capture.threads import ThreadRecord, carrying, moved
from portal.capture.usercode import UserCode
from portal.core.specs import WaitForSafePoint

__all__ = [
    "PORTAL_AT_WORK",
    "CaptureContext",
    "CaptureExtension",
    "FrameRecord",
    "ModuleRecord",
    "ResumedInfo",
    "Snapshot",
    "SnapshotResult",
    "check_position",
    "diagnose",
    "outermost_obstacle",
    "take_snapshot",
]

_NOT_CARRIED_FLAGS = (
    inspect.CO_GENERATOR
    | inspect.CO_COROUTINE
    | inspect.CO_ASYNC_GENERATOR
    | inspect.CO_ITERABLE_COROUTINE
)
#: The ``type_name`` of a position inside Portal's own work: no problem of the program's.
PORTAL_AT_WORK = "Portal at work"
#: The file names of the frozen import machinery's code (``importlib._bootstrap`` and
#: ``_bootstrap_external``): a frame of theirs on the way out is an import in progress.
_IMPORT_MACHINERY = "<frozen importlib."
_COMPREHENSIONS = frozenset({"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>"})
# Module attributes that describe the module object, not the program's state.
_SKIPPED_GLOBALS = frozenset({"__builtins__", "__loader__", "__spec__", "__cached__"})


class CaptureExtension(Protocol):
    """Process-level state a plugin captures and restores (RNGs, settings, ...)."""

    name: str
    capture: Callable[[], Any]
    restore: Callable[[Any], None]


class FrameRecord(NamedTuple):
    """One paused frame, in terms of its *original* code."""

    code: CodeType
    namespace: str  # the module whose namespace is the frame's globals
    slots: list[object]
    stack: list[object]
    resume_at: int  # byte offset of the next instruction
    call_at: int | None  # offset of the call it waits on (None: the innermost frame)
    module_level: bool


class ModuleRecord(NamedTuple):
    name: str
    contents: dict[str, Any]


class Snapshot(NamedTuple):
    """What the one pickle holds."""

    modules: list[ModuleRecord]  # "__main__" first
    frames: list[FrameRecord]  # outermost first
    extensions: list[tuple[str, Any]]
    #: The program's threads parked in a wait, started again there (:mod:`.threads`).
    threads: tuple[ThreadRecord, ...] = ()


class CaptureContext:
    """Everything a capture needs to know about the running program.

    :param user_code: what counts as the user's own code.
    :param main_namespace: ``__main__.__dict__`` of the script.
    :param entry_code: the code object of the script's module frame (the outermost frame of a
        pause); ``None`` takes the outermost module-level frame of ``main_namespace``.
    :param reducers: plugin reducers by fully qualified type name.
    :param extensions: capture extensions, called at every checkpoint.
    :param resumed: registry of resumed code objects (by ``id``).
    """

    def __init__(
        self,
        *,
        user_code: UserCode,
        main_namespace: dict[str, Any],
        entry_code: CodeType | None = None,
        reducers: Mapping[str, Reducer] | None = None,
        extensions: Sequence[CaptureExtension] = (),
        resumed: Mapping[int, ResumedInfo] | None = None,
    ) -> None:
        self.user_code = user_code
        self.main_namespace = main_namespace
        self.entry_code = entry_code
        self.reducers = dict(reducers or {})
        self.extensions = list(extensions)
        self.resumed: Mapping[int, ResumedInfo] = resumed if resumed is not None else {}

    def is_entry(self, frame: FrameType) -> bool:
        if frame.f_globals is not self.main_namespace:
            return False
        if self.entry_code is not None:
            return frame.f_code is self.entry_code
        return frame.f_code.co_name == "<module>" and (
            frame.f_back is None or frame.f_back.f_globals is not self.main_namespace
        )

    def has_safe_points(self, code: CodeType) -> bool:
        """Whether a line of ``code`` can ever be a safe point: code whose frames are carried
        (the user's, a library's: :meth:`UserCode.is_carried_code`), and not a generator,
        coroutine or comprehension (whose frame, running, is never carried), nor a library's
        module body (an import running: the new machine imports it whole)."""
        return (
            not code.co_flags & _NOT_CARRIED_FLAGS
            and code.co_name not in _COMPREHENSIONS
            and self.user_code.is_carried_code(code)
            and (code.co_name != "<module>" or self.user_code.is_user_code(code))
        )

    def resumed_info(self, code: CodeType) -> ResumedInfo | None:
        info = self.resumed.get(id(code))
        return info if info is not None and info.code is code else None


def _importing(frame: FrameType, what: str) -> Problem:
    return _position_problem(
        frame.f_code.co_qualname,
        "import",
        f"a library is being imported ({what}); the pause waits until the import ends",
        frame,
    )


def _position_problem(name: str, type_name: str, reason: str, frame: FrameType) -> Problem:
    return Problem(
        name=name, type_name=type_name, reason=reason, where=where(frame), kind="position"
    )


def check_position(frame: FrameType, ctx: CaptureContext) -> list[FrameType] | Problem:
    """The chain from ``frame`` (paused, innermost) out to the script's entry frame, or why a
    pause cannot be taken here. Cheap: no value is touched.

    A line that Portal's own code ran (a library called by a signal handler of the engine's:
    libraries have safe points too) is no position of the program's: its problem is
    :data:`PORTAL_AT_WORK`, whatever else is on the way out."""
    position = _check_position(frame, ctx)
    if isinstance(position, list) or position.type_name == PORTAL_AT_WORK:
        return position
    f: FrameType | None = frame
    while f is not None and not ctx.is_entry(f):
        if ctx.user_code.is_portal_file(f.f_code.co_filename):
            return _portal_at_work(f)
        f = f.f_back
    return position


def _portal_at_work(f: FrameType) -> Problem:
    return _position_problem(
        f.f_code.co_qualname,
        PORTAL_AT_WORK,
        "Portal's own code is running (a signal handler); the program is not here",
        f,
    )


def _check_position(frame: FrameType, ctx: CaptureContext) -> list[FrameType] | Problem:
    if sys.exc_info()[1] is not None:
        return _position_problem(
            "except block",
            "exception handler",
            "the program is handling an exception (an except or finally block); the pause waits "
            "until the handler ends",
            frame,
        )
    chain: list[FrameType] = []
    f: FrameType | None = frame
    while f is not None:
        code = f.f_code
        if not ctx.user_code.is_carried_code(code):
            if ctx.user_code.is_portal_file(code.co_filename):
                return _portal_at_work(f)
            if code.co_filename.startswith(_IMPORT_MACHINERY):
                return _importing(f, "by the import machinery")
            if ctx.user_code.is_portal_source(code.co_filename):
                return _position_problem(
                    code.co_qualname,
                    "library code",
                    f"Portal's {code.co_qualname} is running inside the program's call (an "
                    "import's hook, a wrapper around a library's method); the pause waits until "
                    "it returns",
                    f,
                )
            bound = ctx.user_code.os_bound_module(code.co_filename)
            return _position_problem(
                code.co_qualname,
                "library code",
                (
                    f"the standard library's {bound} is running ({code.co_qualname}: it holds "
                    "the process's own files, processes, sockets or threads while it runs); "
                    "the pause waits until it returns"
                )
                if bound is not None
                else f"code with no source file ({code.co_filename}) is running between the "
                "script's frames; the pause waits until it returns",
                f,
            )
        if (
            code.co_name == "<module>"
            and not ctx.is_entry(f)
            and not ctx.user_code.is_user_code(code)
        ):
            return _importing(f, os.path.basename(code.co_filename))
        if code.co_flags & _NOT_CARRIED_FLAGS:
            return _position_problem(
                code.co_qualname,
                "generator",
                "a generator or coroutine is partway through; the pause waits until it is left",
                f,
            )
        if code.co_name in _COMPREHENSIONS:
            return _position_problem(
                code.co_qualname,
                "comprehension",
                "a comprehension is partway through; the pause waits until it ends",
                f,
            )
        if not chain:
            info = ctx.resumed_info(code)
            if info is not None and f.f_lasti < info.prologue:
                return _position_problem(
                    code.co_qualname, "resuming frame", "the frame is still being restored", f
                )
        chain.append(f)
        if ctx.is_entry(f):
            return chain
        caller = f.f_back
        if caller is None:
            return _position_problem(
                code.co_qualname,
                "detached frame",
                "the frame is not running under the script's entry frame",
                f,
            )
        if not _frames.reaches(f, caller):
            return _position_problem(
                code.co_qualname,
                "call through C",
                f"{code.co_qualname} was called through C code (a builtin, a class body, a "
                "dunder or a library callback); the pause waits until it returns",
                f,
            )
        f = caller
    raise AssertionError("unreachable")


def outermost_obstacle(frame: FrameType, ctx: CaptureContext) -> FrameType | None:
    """The outermost frame of the chain from ``frame`` out to the script's entry frame that
    keeps every line run inside it from being a safe point: library code, a generator or a
    comprehension partway through, a frame called through C (``list(gen())``, ``map(f, ...)``,
    a library's callback). No pause can be taken until it has left the stack, so a pending
    pause need only listen to the frames outside it. None when no frame of the chain is one,
    or the chain does not reach the entry frame. Cheap: no value is touched."""
    obstacle = None
    f: FrameType | None = frame
    while f is not None:
        if ctx.is_entry(f):
            return obstacle
        caller = f.f_back
        if not ctx.has_safe_points(f.f_code) or (
            caller is not None and not _frames.reaches(f, caller)
        ):
            obstacle = f
        f = caller
    return None


def _record(
    frame: FrameType,
    callee: FrameType | None,
    ctx: CaptureContext,
    namespaces: Mapping[int, str],
    c_call: int | None = None,
    *,
    again: bool = False,
) -> FrameRecord:
    """One frame of the chain; ``callee`` is the frame it waits on (None for the paused one).
    ``c_call``: a carried thread's frame waits in a call into C instead (``time.sleep``), its
    stack this deep below the call (:func:`portal.capture.frames.c_call`); with ``again``,
    the frame does that instruction again at the resume, its stack ``c_call`` deep (the
    ``FOR_ITER`` of ``for x in iter(q.get, None)``:
    :func:`portal.capture.frames.callable_iteration`)."""
    code = frame.f_code
    forwarded = (
        c_call
        if callee is None or _frames.direct_caller(callee, frame)
        else _frames.forwarded_call_depth(callee, frame)
    )
    slots, stack = _frames.read_slots_and_stack(frame, forwarded)
    info = ctx.resumed_info(code)
    if callee is None and (c_call is None or again):
        resume_at, call_at = frame.f_lasti, None
    elif callee is None:
        resume_at, call_at = _frames.c_call_continuation(frame), frame.f_lasti
    elif forwarded is not None:
        resume_at, call_at = _frames.forwarded_continuation(frame), frame.f_lasti
    else:
        resume_at, call_at = _frames.continuation_offset(frame, innermost=False), frame.f_lasti
    if info is not None:
        code = info.original
        if resume_at < info.prologue:  # still waiting on its prologue's call
            resume_at, call_at = info.resume_at, info.call_at
        else:
            resume_at -= info.prologue
            call_at = None if call_at is None else call_at - info.prologue
    return FrameRecord(
        code=code,
        namespace=namespaces[id(frame.f_globals)],
        slots=slots,
        stack=stack,
        resume_at=resume_at,
        call_at=call_at,
        module_level=not code.co_flags & inspect.CO_OPTIMIZED,
    )


def _namespace_contents(
    namespace: dict[str, Any], transient: Mapping[int, set[str]]
) -> dict[str, Any]:
    """What of a namespace travels: not the import machinery's entries, nor the globals a
    library makes again itself (:func:`portal.capture.remade.transient_globals`)."""
    skipped = transient.get(id(namespace))
    if skipped:
        skipped = skipped | _SKIPPED_GLOBALS
        return {k: v for k, v in namespace.items() if k not in skipped}
    return {k: v for k, v in namespace.items() if k not in _SKIPPED_GLOBALS}


@contextmanager
def _user_classes_by_value(modules: Sequence[types.ModuleType]) -> Iterator[None]:
    """Classes of user modules are pickled by value (cloudpickle's registry), only meanwhile."""
    added = []
    for module in modules:
        if not cloudpickle.cloudpickle._is_registered_pickle_by_value(module):
            cloudpickle.register_pickle_by_value(module)
            added.append(module)
    try:
        yield
    finally:
        for module in added:
            cloudpickle.unregister_pickle_by_value(module)


class SnapshotResult(NamedTuple):
    image: CheckpointImage | None
    problems: list[Problem]
    pickle_size: int
    #: From a :class:`WaitForSafePoint`: true once trying again could pass (None: back off).
    ready: Callable[[], bool] | None = None
    #: When every value that failed is held by a frame of the chain: those frames' slots.
    held: HeldValues | None = None


def take_snapshot(
    frame: FrameType,
    chain: Sequence[FrameType],
    ctx: CaptureContext,
    *,
    keep: bool = True,
    requested_time: float = 0.0,
    history: Sequence[Problem] = (),
    for_pause: bool = False,
) -> SnapshotResult:
    """Serialize the program's state with ``frame`` paused, or say what cannot be carried.

    :param chain: from :func:`check_position`, innermost first.
    :param keep: false walks and pickles everything but keeps no bytes (a probe).
    :param history: problems that deferred this pause before, for the header.
    :param for_pause: the process exits once this is written: what must finish first
        (:func:`portal.capture.remade.finish_before_pause`) does, before any state is read;
        the caller undoes it if the pause is not taken.
    """
    safe_point_time = time.time()
    # Each namespace travels once, under one name: a module that is the script's own namespace
    # under another name (``__mp_main__``) would otherwise take that namespace's entry, and the
    # program's functions would come back bound to a copy of it (see UserCode.user_modules).
    user_modules = [
        (name, m)
        for name, m in ctx.user_code.user_modules()
        if m.__dict__ is not ctx.main_namespace
    ]
    namespaces = {id(ctx.main_namespace): "__main__"}
    namespaces.update({id(m.__dict__): name for name, m in user_modules})
    transient = remade.transient_globals(
        [ctx.main_namespace, *(m.__dict__ for _, m in user_modules)]
    )
    modules = [ModuleRecord("__main__", _namespace_contents(ctx.main_namespace, transient))]
    modules += [
        ModuleRecord(name, _namespace_contents(m.__dict__, transient)) for name, m in user_modules
    ]
    # A library's frame runs in its module's namespace, which travels by name only.
    frame_namespaces: dict[int, str] = dict(namespaces)
    library_frames = [f for f in chain if id(f.f_globals) not in namespaces]
    if library_frames:
        frame_namespaces.update(library_namespaces(namespaces))
    for f in library_frames:
        if id(f.f_globals) not in frame_namespaces:
            problem = _position_problem(
                f.f_code.co_qualname,
                "foreign globals",
                "the function runs with globals that are no module's namespace (exec with a "
                "dict of its own); the pause waits until it returns",
                f,
            )
            return SnapshotResult(None, [problem], 0)
    if for_pause:
        remade.finish_before_pause()
    records = [
        _record(f, chain[i - 1] if i else None, ctx, frame_namespaces) for i, f in enumerate(chain)
    ]
    records.reverse()
    # From the threads' reading on, a carried thread whose wait ends is held back.
    with carrying(ctx, namespaces, _record) as threads:
        extensions = [
            (ext.name, ext.capture())
            for ext in ctx.extensions
            if all(m in sys.modules for m in getattr(ext, "modules", ()))
        ]
        snapshot = Snapshot(
            modules=modules, frames=records, extensions=extensions, threads=tuple(threads.records)
        )
        reducers = resolve_reducers(ctx.reducers)
        user_names = set(namespaces.values())
        carried = [(r.code, r.namespace) for r in records if r.namespace not in user_names]
        with _user_classes_by_value([m for _, m in user_modules]):
            try:
                data, buffers, size = dumps(
                    _globals_first(snapshot),
                    namespaces=namespaces,
                    reducers=reducers,
                    keep=keep,
                    places=global_places([(m.name, m.contents) for m in snapshot.modules]),
                    library_code=carried,
                )
            except Exception as exc:
                slots: list[HeldSlot | None] = []
                problems = diagnose(
                    snapshot,
                    chain,
                    namespaces,
                    reducers,
                    exc,
                    held=slots,
                    is_user_code=ctx.user_code.is_user_code,
                    thread_frames=threads.live_frames,
                )
                # A value that only needs a later line (WaitForSafePoint) delays the pause like a
                # position does; whatever else is wrong is named once that has passed.
                waiting = [p for p in problems if p.kind == "position"]
                ready = exc.ready if isinstance(exc, WaitForSafePoint) else None
                exc.__traceback__ = None  # its frames (the pickler's) hold the state: let them go
                held = None
                if not waiting and slots and all(slot is not None for slot in slots):
                    held = HeldValues([slot for slot in slots if slot is not None], chain)
                return SnapshotResult(None, waiting or problems, 0, ready, held)
            woke = moved(threads)  # before the waiters held back meanwhile go on
    if woke is not None:
        problem = _position_problem(
            woke,
            "threading.Thread",
            f"thread {woke!r} woke from its wait while the checkpoint was taken; the pause "
            "tries again at a later line",
            frame,
        )
        return SnapshotResult(None, [problem], 0)
    if not keep:
        return SnapshotResult(None, [], size)
    header = Header(
        interpreter=InterpreterInfo.current(),
        script=os.path.abspath(ctx.user_code.script),
        argv=list(sys.argv),
        cwd=os.getcwd(),
        created=time.time(),
        paused_at=where(frame, ctx.user_code.is_user_code),
        safe_point_time=safe_point_time,
        requested_time=requested_time,
        imports=_imports_to_replay(namespaces),
        user_modules=[
            ModuleRef(name=name, file=getattr(m, "__file__", None)) for name, m in user_modules
        ],
        problems=[ProblemRecord(**p.to_dict()) for p in history],
        libraries=describe_all(carried),
    )
    # Where each buffer lies now (the live memory, not copied yet): its file keeps the alignment.
    alignments = [remainder_of(b) for b in buffers]  # (a staged GPU buffer's: 0)
    image = CheckpointImage(header=header, pickle=data, buffers=buffers, alignments=alignments)
    return SnapshotResult(image, [], size)


def _globals_first(snapshot: Snapshot) -> GlobalsFirst:
    """How ``snapshot`` is pickled: the user namespaces' globals first, each set in its module as
    it loads (:mod:`portal.capture.namespaces`), then the snapshot, whose module records hold the
    filled namespaces themselves."""
    filled = [
        ModuleRecord(m.name, cast(dict[str, Any], NamespaceRef(m.name))) for m in snapshot.modules
    ]
    return GlobalsFirst(
        snapshot._replace(modules=filled), [(m.name, m.contents) for m in snapshot.modules]
    )


def _imports_to_replay(namespaces: Mapping[int, str]) -> list[str]:
    """Installed modules the program has loaded, in load order: the resumed process imports them
    again before loading the state (a pickled module is only a name; its submodules must be
    there too)."""
    user = set(namespaces.values())
    names = []
    for name, module in list(sys.modules.items()):
        if name in user or name == "__main__" or name.startswith("portal."):
            continue
        if isinstance(module, types.ModuleType):
            names.append(name)
    return names


def _frame_roots(
    roots: list[tuple[str, object, str, HeldSlot | None]],
    records: Sequence[FrameRecord],
    frames: Sequence[FrameType],
    is_user_code: Callable[[CodeType], bool] | None,
    *,
    held: bool,
) -> None:
    """Each local and value-stack entry of ``records`` (outermost first; ``frames`` innermost
    first) as a root to diagnose, innermost frame first; ``held``: with the slot holding it (the
    paused thread's frames, whose slots a pause may wait on)."""
    for record, frame in reversed(list(zip(records, reversed(frames), strict=True))):
        at = where(frame, is_user_code)
        names = [record.code._varname_from_oparg(i) for i in range(len(record.slots))]  # type: ignore[attr-defined]
        for index, (name, value) in enumerate(zip(names, record.slots, strict=True)):
            if value is NULL:
                continue
            slot = HeldSlot(frame, index, id(value)) if held else None
            if isinstance(value, types.CellType):
                try:
                    value = value.cell_contents
                except ValueError:
                    continue
            roots.append((name, value, at, slot))
        for i, value in enumerate(record.stack):
            if value is not NULL:
                slot = HeldSlot(frame, len(record.slots) + i, id(value)) if held else None
                roots.append((f"<value stack [{i}] of {record.code.co_name}>", value, at, slot))


def diagnose(
    snapshot: Snapshot,
    chain: Sequence[FrameType],
    namespaces: Mapping[int, str],
    reducers: Mapping[type, Reducer],
    error: BaseException,
    *,
    budget: int = 2000,
    held: list[HeldSlot | None] | None = None,
    is_user_code: Callable[[CodeType], bool] | None = None,
    thread_frames: Sequence[Sequence[FrameType]] = (),
) -> list[Problem]:
    """Name each value of ``snapshot`` that cannot be pickled, as the script knows it.

    Pickles each root (a global, a local, a stack entry) alone; for each that fails, descends
    into its parts (``[key]``, ``[i]``, ``.attr``) while a part still fails, and reports the
    deepest failing values. Runs only after a real pickle failed, so its cost is paid only then.

    :param held: receives, for each root that fails, the frame slot holding it (None for a
        global or an extension's state): see :mod:`portal.capture.held`.
    :param is_user_code: names, for a library's frame, the script's line it runs under.
    :param thread_frames: each of ``snapshot.threads``' live frames, innermost first.
    """
    innermost_where = where(chain[0], is_user_code) if chain else "?"
    seen: set[int] = set()
    problems: list[Problem] = []
    remaining = [budget]

    def fails(value: object) -> BaseException | None:
        remaining[0] -= 1
        return pickle_error(value, namespaces=namespaces, reducers=reducers)

    def descend(value: object, path: str, err: BaseException, at: str, depth: int) -> None:
        if id(value) in seen:
            return
        found = False
        if depth < 12 and remaining[0] > 0:
            for suffix, child in iter_children(value):
                if remaining[0] <= 0:
                    break
                child_err = fails(child)
                if child_err is not None:
                    found = True
                    descend(child, path + suffix, child_err, at, depth + 1)
        if not found and id(value) not in seen:
            seen.add(id(value))
            waits = isinstance(err, WaitForSafePoint)
            problems.append(
                Problem(
                    name=path,
                    type_name=describe_type(value),
                    reason=str(err) if waits else f"{type(err).__name__}: {err}",
                    where=at,
                    kind="position" if waits else "value",
                )
            )

    roots: list[tuple[str, object, str, HeldSlot | None]] = []
    _frame_roots(roots, snapshot.frames, chain, is_user_code, held=True)
    for thread, live in zip(snapshot.threads, thread_frames, strict=True):
        _frame_roots(roots, thread.frames, live, is_user_code, held=False)
    for module in snapshot.modules:
        prefix = "" if module.name == "__main__" else f"{module.name}."
        for name, value in module.contents.items():
            roots.append((prefix + name, value, innermost_where, None))
    for name, state in snapshot.extensions:
        roots.append((f"<capture extension {name}>", state, innermost_where, None))

    for name, value, at, holder in roots:
        if remaining[0] <= 0:
            break
        err = fails(value)
        if err is not None:
            if held is not None:
                held.append(holder)
            descend(value, name, err, at, 0)
    if not problems:  # the failure is in how the parts combine (or the budget ran out)
        waits = isinstance(error, WaitForSafePoint)
        problems.append(
            Problem(
                name="<state>",
                type_name="checkpoint",
                reason=str(error) if waits else f"{type(error).__name__}: {error}",
                where=innermost_where,
                kind="position" if waits else "value",
            )
        )
    return problems
