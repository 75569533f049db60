"""Suspended generators of the user's code, carried like paused frames.

``for step, batch in enumerate(batches()):`` is the most common way to feed a training loop, and
``batches`` is a generator function of the script: at every safe point of that loop its
generator is suspended at a ``yield``. Pickle refuses generators, but a suspended generator is a
frame like any other (locals, cells, value stack, the instruction it continues at), which the
engine already knows how to read and to rebuild with a prologue (:mod:`portal.capture.codegen`).

A generator travels in one of three states:

* **suspended** at a ``yield`` (perhaps inside ``yield from`` another generator, which is then
  on its stack and travels too): rebuilt as a new generator of a resumed code object that
  restores the slots and the stack and jumps into the original ``YIELD_VALUE`` with ``None``
  to yield; it is advanced once at load, so it is then suspended at the very instruction the
  original was, with the same stack: ``next``/``send`` continue after the ``yield`` with the
  value sent, ``throw`` and ``close`` meet the same ``try``/``finally``/``with`` blocks, and
  inside ``yield from`` the sub-iterator is delegated to as before (``gi_yieldfrom``);
* **created**, not started yet: its arguments are in its frame; it is made again by calling the
  function with them (its code is the original, so it can be carried again as it is);
* **finished** (exhausted or closed): an exhausted generator of the same name.

Generators of the user's code and of installed libraries are carried this way (a framework's
``DataLoaderShard.__iter__``, a ``@contextmanager`` of a library the loop is inside): a
library's runs in its module's namespace, which the new machine imports, and its code is named in
the checkpoint's header so the resume refuses a library that changed
(:mod:`portal.capture.libraries`). A generator whose globals are no module's namespace (made by
``exec`` with a dict of its own) is named and refused. A generator that is running is part of the paused chain, where
:func:`portal.capture.snapshot.check_position` defers the pause. Identity is pickle's: a
generator reached twice is one generator after the resume.

Functions a checkpoint's pickle calls at load: their names are part of the stored format.
"""

from __future__ import annotations

import builtins
import inspect
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

from portal.capture import codegen, frames
from portal.capture.restoring import RESUMED_CODE, ResumedInfo

__all__ = [
    "created_generator",
    "finished_generator",
    "original_code",
    "reduce_generator",
    "suspended_generator",
]


def reduce_generator(
    gen: types.GeneratorType[Any, Any, Any],
    namespaces: Mapping[int, str],
    namespace_ref: Callable[[str], Any],
) -> Any:
    """The pickle reduction of ``gen`` (see the module docstring), or ``TypeError`` naming it."""
    code = gen.gi_code
    frame = gen.gi_frame
    if frame is None:  # finished: nothing of it is left to carry but its name
        return (finished_generator, (gen.__name__, gen.__qualname__))
    namespace = namespaces.get(id(frame.f_globals))
    if namespace is None:
        raise TypeError(
            f"cannot pickle 'generator' object: {gen.__qualname__} of "
            f"{frame.f_globals.get('__name__', '?')} runs with globals that are no module's "
            "namespace (exec with a dict of its own)"
        )
    if gen.gi_running:
        raise TypeError(f"cannot pickle 'generator' object: {gen.__qualname__} is running")
    slots, stack = frames.read_slots_and_stack(frame)
    lasti = frame.f_lasti
    info = RESUMED_CODE.get(id(code))
    if info is not None and info.code is code:  # a generator rebuilt by an earlier resume
        if lasti < info.prologue:  # never advanced into its code: its load was cut short
            raise TypeError(
                f"cannot pickle 'generator' object: {gen.__qualname__} is being restored"
            )
        yield_at = codegen.yield_offset(info.original, lasti - info.prologue)
        code = info.original
    elif gen.gi_suspended:
        yield_at = codegen.yield_offset(code, lasti)
    else:  # created: the frame holds its arguments
        return (
            created_generator,
            (code, namespace_ref(namespace), gen.__name__, gen.__qualname__, slots),
        )
    return (
        suspended_generator,
        (code, namespace_ref(namespace), gen.__name__, gen.__qualname__, slots, stack, yield_at),
    )


def original_code(gen: types.GeneratorType[Any, Any, Any]) -> types.CodeType:
    """The code ``gen`` was made from: for a generator rebuilt by an earlier resume, the
    original code its resumed code stands for."""
    code = gen.gi_code
    info = RESUMED_CODE.get(id(code))
    return info.original if info is not None and info.code is code else code


def _function(
    code: types.CodeType,
    globals_: dict[str, Any],
    name: str,
    qualname: str,
    slots: Sequence[object],
    original: types.CodeType,
    defaults: tuple[object, ...] | None = None,
) -> types.FunctionType:
    nfree = len(original.co_freevars)
    closure = None
    if nfree:
        nslots = frames.local_slot_count(original)
        closure = tuple(
            value if isinstance(value, types.CellType) else types.CellType()
            for value in slots[nslots - nfree : nslots]
        )
    globals_.setdefault("__builtins__", builtins)
    func = types.FunctionType(code, globals_, name, defaults, closure)
    func.__qualname__ = qualname
    return func


def _contents(value: object) -> object:
    """An argument's value (an argument a closure captures is a cell once the frame exists)."""
    if isinstance(value, types.CellType):
        return value.cell_contents
    return value


def created_generator(
    code: types.CodeType,
    globals_: dict[str, Any],
    name: str,
    qualname: str,
    slots: list[object],
) -> types.GeneratorType[Any, Any, Any]:
    """A generator not started yet: its function called again with the same arguments."""
    args = [_contents(v) for v in slots[: code.co_argcount]]
    at = code.co_argcount
    kwargs = {
        code.co_varnames[i]: _contents(slots[i]) for i in range(at, at + code.co_kwonlyargcount)
    }
    at += code.co_kwonlyargcount
    if code.co_flags & inspect.CO_VARARGS:
        args.extend(cast("tuple[object, ...]", _contents(slots[at])))
        at += 1
    if code.co_flags & inspect.CO_VARKEYWORDS:
        kwargs.update(cast("dict[str, object]", _contents(slots[at])))
    gen = _function(code, globals_, name, qualname, slots, code)(*args, **kwargs)
    if not isinstance(gen, types.GeneratorType):
        raise TypeError(f"{qualname} did not make a generator")
    return gen


def suspended_generator(
    code: types.CodeType,
    globals_: dict[str, Any],
    name: str,
    qualname: str,
    slots: list[object],
    stack: list[object],
    yield_at: int,
) -> types.GeneratorType[Any, Any, Any]:
    """A generator suspended at the ``yield`` at ``yield_at`` of ``code``, with its state."""
    argument_slots = code.co_argcount + code.co_kwonlyargcount
    argument_slots += bool(code.co_flags & inspect.CO_VARARGS)
    argument_slots += bool(code.co_flags & inspect.CO_VARKEYWORDS)
    resumed = codegen.build_resumed_code(
        code,
        slots=slots,
        stack=stack,
        resume_at=yield_at,
        prefilled=argument_slots,
        generator=True,
        at_yield=True,
    )
    RESUMED_CODE[id(resumed.code)] = ResumedInfo(
        code=resumed.code,
        original=code,
        prologue=resumed.prologue,
        resume_at=yield_at,
        call_at=None,
    )
    func = _function(resumed.code, globals_, name, qualname, slots, code)
    if code.co_argcount:
        func.__defaults__ = (None,) * code.co_argcount
    if code.co_kwonlyargcount:
        first = code.co_argcount
        names = code.co_varnames[first : first + code.co_kwonlyargcount]
        func.__kwdefaults__ = dict.fromkeys(names)
    gen = func()
    if not isinstance(gen, types.GeneratorType):
        raise TypeError(f"{qualname} did not make a generator")
    if next(gen) is not None:  # runs the prologue into the original yield (which yields None)
        raise AssertionError("a rebuilt generator's prologue yielded a value")
    return gen


def finished_generator(name: str, qualname: str) -> types.GeneratorType[Any, Any, Any]:
    """A generator that has finished (``next`` raises ``StopIteration``)."""

    def finished() -> Iterator[Any]:
        return
        yield  # pragma: no cover - makes this a generator function

    gen = cast("types.GeneratorType[Any, Any, Any]", finished())
    gen.__name__ = name
    gen.__qualname__ = qualname
    gen.close()
    return gen
