"""Continuing a checkpoint in this process: namespaces back, frames rebuilt as resumed code.

Order matters. Installed modules are imported first ("imports run again on the new machine"),
then empty module objects are made for ``__main__`` and the user modules so the pickle can refer
to their namespaces by name; the one pickle loads, setting each global in its namespace as soon
as it has loaded, definitions first (:mod:`portal.capture.namespaces`: the user's code run while
the rest loads, a dict subclass's ``__setitem__`` or an Enum's ``__new__``, finds its module's
globals); capture extensions restore their process-level state; the rebuilds the pickle deferred
until then run, in the order the pickle made them (:func:`after_restore`: an open file of the
working directory stands on a placeholder while the pickle loads and is opened only now, once
the directory's files are back); and the frames are rebuilt innermost first, each outer frame's
prologue calling the resumed function of the frame inside it. The program's threads that were
carried in their waits (:mod:`portal.capture.threads`) are then started again there, each the
same way: its innermost frame's prologue calls the wait again. The caller executes the returned
module code in ``__main__``'s namespace.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.util
import io
import pickle
import sys
import types
from collections.abc import Callable, Sequence
from types import CodeType
from typing import Any, NamedTuple

from portal.capture import threads
from portal.capture._rebuild import module_namespace
from portal.capture.codegen import build_resumed_code
from portal.capture.frames import local_slot_count
from portal.capture.image import CheckpointImage
from portal.capture.libraries import verify as verify_libraries
from portal.capture.restoring import RESUMED_CODE, ResumedInfo, after_restore, deferring
from portal.capture.snapshot import CaptureExtension, FrameRecord, Snapshot

__all__ = [
    "RESUMED_CODE",
    "Restored",
    "after_restore",
    "build_frames",
    "build_thread",
    "restore",
]


class Restored(NamedTuple):
    module_code: CodeType  # the script's module frame, resumed
    main_namespace: dict[str, Any]


class _Unpickler(pickle.Unpickler):
    """Finds classes by name as pickle does; exists to make one place to hook lookups."""


def restore(
    image: CheckpointImage,
    main_module: types.ModuleType,
    *,
    extensions: Sequence[CaptureExtension] = (),
    path: str = "the checkpoint",
) -> Restored:
    """Load ``image`` into this process (see module docstring); return what to execute.
    Refuses (``LibraryMismatchError``) before any of the state loads if a library function it
    was paused inside is installed differently here."""
    header = image.header
    for name in header.imports:
        if name not in sys.modules:
            try:
                importlib.import_module(name)
            except Exception:
                continue
    verify_libraries(header.libraries, path)
    sys.modules["__main__"] = main_module
    for ref in header.user_modules:
        module = types.ModuleType(ref.name)
        if ref.file:
            module.__file__ = ref.file
            # A spec and loader as an import would give them (importlib.reload, inspect...).
            spec = importlib.util.spec_from_file_location(ref.name, ref.file)
            if spec is not None:
                module.__spec__ = spec
                module.__loader__ = spec.loader
        module.__builtins__ = builtins  # type: ignore[attr-defined]
        sys.modules[ref.name] = module
    main_module.__dict__.setdefault("__builtins__", builtins)
    for ref in header.user_modules:  # a submodule is an attribute of its package
        parent, _, child = ref.name.rpartition(".")
        if parent and parent in sys.modules:
            setattr(sys.modules[parent], child, sys.modules[ref.name])
    with deferring() as deferred:
        snapshot = _Unpickler(io.BytesIO(image.pickle), buffers=image.buffers).load()
        if not isinstance(snapshot, Snapshot):
            raise TypeError(f"checkpoint state is a {type(snapshot).__name__}, not a Snapshot")
        for record in snapshot.modules:
            namespace = sys.modules[record.name].__dict__
            if record.contents is not namespace:  # a checkpoint that filled them afterwards
                namespace.update(record.contents)
            namespace.setdefault("__builtins__", builtins)
        by_name = {ext.name: ext for ext in extensions}
        for name, state in snapshot.extensions:
            ext = by_name.get(name)
            if ext is not None:
                ext.restore(state)
    for rebuild in deferred:
        rebuild()
    module_code = build_frames(snapshot.frames)
    for carried in snapshot.threads:  # each in its wait again, once the rest is back
        threads.start(carried, build_thread(carried.frames, carried.wait))
    return Restored(module_code, main_module.__dict__)


def build_frames(
    records: Sequence[FrameRecord], registry: dict[int, ResumedInfo] | None = None
) -> CodeType:
    """Resumed code for each frame (outermost first in ``records``); returns the module frame's.

    Each function frame becomes a function object with the resumed code, called by its caller's
    prologue with no arguments: it keeps its signature, so its parameters get dummy defaults
    (overwritten by the prologue) and zero-argument ``super()`` still finds its ``__class__``.
    """
    registry = RESUMED_CODE if registry is None else registry
    inner: Callable[[], Any] | None = None
    for record in reversed(records):
        code = _resumed(record, inner, registry)
        if record.module_level:
            if record is not records[0]:
                raise ValueError("only the outermost frame of a checkpoint may be module-level")
            return code
        inner = _function_for(code, record.code, record)
    raise ValueError("a checkpoint's outermost frame must be the script's module frame")


def build_thread(
    records: Sequence[FrameRecord],
    wait: Callable[[], Any] | None,
    registry: dict[int, ResumedInfo] | None = None,
) -> Callable[[], Any]:
    """The resumed function of a carried thread's outermost frame (``records`` outermost
    first), whose innermost frame calls ``wait`` again where it stood, or (``wait`` None) does
    its instruction again (:mod:`portal.capture.threads`)."""
    registry = RESUMED_CODE if registry is None else registry
    inner: Callable[[], Any] | None = wait
    for record in reversed(records):
        if record.module_level:
            raise ValueError("a carried thread's frames are function frames")
        inner = _function_for(_resumed(record, inner, registry), record.code, record)
    if inner is None:
        raise ValueError("a carried thread has no frames")
    return inner


def _resumed(
    record: FrameRecord, call: Callable[[], Any] | None, registry: dict[int, ResumedInfo]
) -> CodeType:
    """``record``'s resumed code (its prologue calling ``call``, for an outer frame), registered
    so that a later pause inside it reads it in terms of the original code."""
    resumed = build_resumed_code(
        record.code,
        slots=record.slots,
        stack=record.stack,
        resume_at=record.resume_at,
        call=call,
        call_at=record.call_at,
        prefilled=0 if record.module_level else _argument_slots(record.code),
    )
    registry[id(resumed.code)] = ResumedInfo(
        code=resumed.code,
        original=record.code,
        prologue=resumed.prologue,
        resume_at=record.resume_at,
        call_at=record.call_at,
    )
    return resumed.code


def _argument_slots(code: CodeType) -> int:
    n = code.co_argcount + code.co_kwonlyargcount
    n += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)  # *args, **kwargs
    return n


def _function_for(code: CodeType, original: CodeType, record: FrameRecord) -> types.FunctionType:
    nslots = local_slot_count(original)
    nfree = len(original.co_freevars)
    closure = None
    if nfree:
        cells = []
        for value in record.slots[nslots - nfree : nslots]:
            cells.append(value if isinstance(value, types.CellType) else types.CellType())
        closure = tuple(cells)
    namespace = module_namespace(record.namespace)
    namespace.setdefault("__builtins__", builtins)
    defaults = (None,) * original.co_argcount or None
    func = types.FunctionType(code, namespace, original.co_name, defaults, closure)
    if original.co_kwonlyargcount:
        first = original.co_argcount
        names = original.co_varnames[first : first + original.co_kwonlyargcount]
        func.__kwdefaults__ = dict.fromkeys(names)
    func.__qualname__ = original.co_qualname
    return func
