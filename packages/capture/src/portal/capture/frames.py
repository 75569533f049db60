"""Read-only access to CPython's interpreter frames (3.11-3.13, 64-bit release builds).

Python exposes a frame's locals only as a snapshot (and 3.13's ``f_locals`` as a proxy), and its
value stack not at all; a checkpoint needs both, exactly: NULL slots, cell objects by identity,
loop iterators and pending operands on the stack. So this module reads ``_PyInterpreterFrame``
with ctypes, at offsets established per version (see docs/design "capture"). It never writes.

Every read happens while the frames are alive and the reading thread holds the GIL: the only
caller is the safe-point callback, on the paused thread itself.
"""

from __future__ import annotations

import ctypes
import dis
import functools
import sys
from collections.abc import Callable
from types import CodeType, FrameType, FunctionType, MethodType
from typing import Final, NamedTuple

from portal.capture import stackdepth
from portal.capture.codegen import NULL, cache_entries

__all__ = [
    "LAYOUT",
    "FrameLayout",
    "callable_iteration",
    "continuation_offset",
    "direct_caller",
    "forwarded_call_depth",
    "forwarded_continuation",
    "in_loop",
    "local_slot_count",
    "reaches",
    "read_slots_and_stack",
    "slot_address",
]


class FrameLayout(NamedTuple):
    """Byte offsets into ``_PyInterpreterFrame`` for one CPython minor version."""

    previous: int
    stacktop: int
    is_entry: int | None  # 3.11 only: the frame was entered from C
    return_offset: int | None  # 3.12+: code units after the call where the caller continues
    owner: int
    localsplus: int


_LAYOUTS: Final = {
    (3, 11): FrameLayout(
        previous=48, stacktop=64, is_entry=68, return_offset=None, owner=69, localsplus=72
    ),
    (3, 12): FrameLayout(
        previous=8, stacktop=64, is_entry=None, return_offset=68, owner=70, localsplus=72
    ),
    (3, 13): FrameLayout(
        previous=8, stacktop=64, is_entry=None, return_offset=68, owner=70, localsplus=72
    ),
}
_F_FRAME: Final = 24  # PyFrameObject.f_frame
_FRAME_OWNED_BY_CSTACK: Final = 3  # 3.12+: the shim frame of an eval loop entered from C
_CALL_FUNCTION_EX: Final = dis.opmap["CALL_FUNCTION_EX"]
_CALL_KW: Final = dis.opmap.get("CALL_KW", -1)  # 3.13: a call with keyword arguments
_CALLS: Final = frozenset(op for op in (dis.opmap["CALL"], _CALL_KW) if op >= 0)
_EXTENDED_ARG: Final = dis.opmap["EXTENDED_ARG"]
_FOR_ITER: Final = dis.opmap["FOR_ITER"]
_CALLABLE_ITERATOR: Final = type(iter(int, 1))
_PTR: Final = ctypes.sizeof(ctypes.c_void_p)

LAYOUT: Final = _LAYOUTS.get(sys.version_info[:2])

_nlocalsplus_cache: dict[int, tuple[CodeType, int]] = {}
_loops_cache: dict[int, tuple[CodeType, tuple[tuple[int, int], ...]]] = {}
#: Backward jumps that close a loop (3.11 also has conditional ones; the no-interrupt one is a
#: ``yield from``'s, no loop of the program's).
_LOOP_JUMPS: Final = frozenset(
    op
    for name, op in dis.opmap.items()
    if "JUMP_BACKWARD" in name and name != "JUMP_BACKWARD_NO_INTERRUPT"
)


def _iframe(frame: FrameType) -> int:
    address = ctypes.c_void_p.from_address(id(frame) + _F_FRAME).value
    if not address:
        raise RuntimeError("frame has no interpreter frame (it has finished)")
    return address


def _layout() -> FrameLayout:
    if LAYOUT is None:
        raise RuntimeError(f"no frame layout for Python {sys.version_info[:2]}")
    return LAYOUT


def local_slot_count(code: CodeType) -> int:
    """``co_nlocalsplus``: locals, cells and free variables (an argument that is also a cell
    counts once, which is why ``len(co_varnames) + len(co_cellvars) + ...`` is wrong)."""
    cached = _nlocalsplus_cache.get(id(code))
    if cached is not None and cached[0] is code:
        return cached[1]
    lo, hi = 0, 1
    name_of = code._varname_from_oparg  # type: ignore[attr-defined]
    while True:  # exponential then binary search for the first index that raises
        try:
            name_of(hi - 1)
        except IndexError:
            break
        lo, hi = hi, hi * 2
    while lo < hi:
        mid = (lo + hi) // 2
        try:
            name_of(mid)
            lo = mid + 1
        except IndexError:
            hi = mid
    _nlocalsplus_cache[id(code)] = (code, lo)
    return lo


def direct_caller(callee: FrameType, caller: FrameType) -> bool:
    """Whether ``caller`` called ``callee`` directly, Python to Python, with no C in between.

    3.11 marks a frame entered from C with ``is_entry``; 3.12+ puts a shim frame between, so
    ``previous`` no longer points at the caller.
    """
    layout = _layout()
    inner = _iframe(callee)
    previous = ctypes.c_void_p.from_address(inner + layout.previous).value or 0
    if previous != _iframe(caller):
        return False
    return layout.is_entry is None or not ctypes.c_bool.from_address(inner + layout.is_entry).value


def forwarded_call_depth(callee: FrameType, caller: FrameType) -> int | None:
    """For a call through C that only forwards a call: ``caller`` waits at ``CALL_FUNCTION_EX``
    (``f(*args, **kwargs)``) whose callable is ``callee``'s function or a method bound to it, or
    at a plain call of a ``functools.partial`` of it, and the interpreter entered ``callee`` from
    that instruction through C that holds no state of its own. The depth of ``caller``'s value
    stack below the call's operands (the stack it continues with, the return value on top), or
    None for any other call.

    3.11 makes every ``f(*args)`` such a call, 3.12 and 3.13 ``obj.method(*args)``; inside one,
    a frame's stack pointer is not saved, so the depth comes from the bytecode
    (:mod:`portal.capture.stackdepth`), and is trusted only when the slots it names hold the
    callable and the NULL beside it, as the interpreter left them.
    """
    code = caller.f_code
    lasti = caller.f_lasti
    raw = code.co_code
    if not 0 <= lasti < len(raw):
        return None
    op = raw[lasti]
    if op == _CALL_FUNCTION_EX:
        operands = 3 + (raw[lasti + 1] & 1)  # callable, NULL, positional tuple, keyword dict
        calls = _calls_code
    elif op in _CALLS and (lasti < 2 or raw[lasti - 2] != _EXTENDED_ARG):
        # callable and NULL (or self), the arguments, 3.13's keyword names; on 3.11 the
        # bytecode's stack effects count the arguments as taken by the PRECALL before it.
        operands = 2 + (0 if LAYOUT is _LAYOUTS[(3, 11)] else raw[lasti + 1] + (op == _CALL_KW))
        calls = _partial_calls_code
    else:
        return None
    if not _entered_from_c(callee, caller):
        return None
    found = _call_operands(caller, operands)
    if found is None or not calls(found[1], callee.f_code):
        return None
    return found[0]


def _entered_from_c(callee: FrameType, caller: FrameType) -> bool:
    """Whether the interpreter entered ``callee`` through C called from ``caller``'s
    instruction (no Python frame between them)."""
    layout = _layout()
    inner = _iframe(callee)
    outer = _iframe(caller)
    previous = ctypes.c_void_p.from_address(inner + layout.previous).value or 0
    if layout.is_entry is not None:  # 3.11: the callee is an entry frame linked to the caller
        return previous == outer and ctypes.c_bool.from_address(inner + layout.is_entry).value
    # 3.12+: the C entry's shim frame sits between
    if not previous:
        return False
    if ctypes.c_uint8.from_address(previous + layout.owner).value != _FRAME_OWNED_BY_CSTACK:
        return False
    return (ctypes.c_void_p.from_address(previous + layout.previous).value or 0) == outer


def callable_iteration(callee: FrameType, caller: FrameType) -> int | None:
    """For ``for x in iter(f, sentinel):``: ``caller`` stands at its ``FOR_ITER``, whose iterator
    (on top of its stack) is the ``callable_iterator`` of a function (or a method bound to one)
    whose code is ``callee``'s, and the interpreter entered ``callee`` from there through that
    iterator's ``__next__``, C that holds nothing but the callable and the sentinel. The depth
    of ``caller``'s stack at the ``FOR_ITER`` (the iterator on top: done again, the instruction
    calls the function again), or None for anything else."""
    code = caller.f_code
    lasti = caller.f_lasti
    raw = code.co_code
    if not 0 <= lasti < len(raw) or raw[lasti] != _FOR_ITER:
        return None
    if not _entered_from_c(callee, caller):
        return None
    depth = stackdepth.depth_before(code, lasti)
    if depth is None or not 1 <= depth <= code.co_stacksize:
        return None
    address = ctypes.c_void_p.from_address(_stack_slot(caller, depth - 1)).value
    if not address:
        return None
    iterator = ctypes.cast(address, ctypes.py_object).value
    if type(iterator) is not _CALLABLE_ITERATOR:
        return None
    reduced = iterator.__reduce__()
    if len(reduced) < 2 or len(reduced[1]) != 2:
        return None  # exhausted: it calls nothing any more
    if not _calls_code(reduced[1][0], callee.f_code):
        return None
    return depth


def _stack_slot(frame: FrameType, index: int) -> int:
    """The address of entry ``index`` (from the bottom) of ``frame``'s value stack."""
    return _iframe(frame) + _layout().localsplus + (local_slot_count(frame.f_code) + index) * _PTR


def _call_operands(caller: FrameType, operands: int) -> tuple[int, object, int] | None:
    """For a frame at a call taking ``operands`` stack slots: the depth of its stack below
    them, the callable, and the address of the slot after the callable's pair (the first
    argument's), when the pair holds one object and one NULL as the interpreter leaves them
    during the call; None otherwise. Only that one non-NULL slot is read as an object."""
    code = caller.f_code
    depth = stackdepth.depth_before(code, caller.f_lasti)
    if depth is None or not operands <= depth <= code.co_stacksize:
        return None
    below = depth - operands
    first = _stack_slot(caller, below)
    pair = [ctypes.c_void_p.from_address(first + i * _PTR).value for i in (0, 1)]
    if sum(1 for address in pair if not address) != 1:
        return None
    target = ctypes.cast(pair[0] or pair[1] or 0, ctypes.py_object).value
    return below, target, first + 2 * _PTR


class CCall(NamedTuple):
    """A call into C that a frame stands in (:func:`c_call`)."""

    below: int  # the depth of the frame's value stack below the call's operands
    target: object  # what it calls
    args: tuple[object, ...]  # its positional arguments


_CALL: Final = dis.opmap["CALL"]
_PRECALL: Final = dis.opmap.get("PRECALL", -1)  # 3.11


def c_call(caller: FrameType, accepts: Callable[[object], bool]) -> CCall | None:
    """For a frame of another thread's that stands at a plain ``CALL`` whose callable
    ``accepts`` takes (``time.sleep``, say, or a ``functools.partial`` of it): the call, or None.

    The other thread lets go of the GIL only inside a call or at the interpreter's periodic
    check, which comes at the end of a ``CALL``, once the result stands where the callable and
    the NULL beside it stood. So a frame at a ``CALL`` whose two slots still hold a callable and
    a NULL is inside that call, and the slots above them hold its arguments, alive (the stack
    owns them). Only that one non-NULL slot is read as an object before the check passes.
    """
    code = caller.f_code
    lasti = caller.f_lasti
    raw = code.co_code
    if not 0 <= lasti < len(raw) - 1 or raw[lasti] not in (_CALL, _PRECALL):
        return None
    if lasti >= 2 and raw[lasti - 2] == _EXTENDED_ARG:
        return None
    nargs = raw[lasti + 1]
    # 3.11's stack effects count the arguments as taken by the PRECALL before the CALL; a
    # PRECALL specialized for a builtin (``time.sleep`` once warm) makes the call itself.
    in_311_call = LAYOUT is _LAYOUTS[(3, 11)] and raw[lasti] == _CALL
    found = _call_operands(caller, 2 + (0 if in_311_call else nargs))
    if found is None or not accepts(found[1]):
        return None
    below, target, first = found
    addresses = [ctypes.c_void_p.from_address(first + i * _PTR).value for i in range(nargs)]
    args = tuple(ctypes.cast(a, ctypes.py_object).value for a in addresses if a)
    if len(args) != nargs:
        return None
    return CCall(below, target, args)


def c_call_continuation(frame: FrameType) -> int:
    """Where a frame standing in a call into C (:func:`c_call`) continues: after the ``CALL``
    and its cache entries (on 3.11, after a ``PRECALL`` that made the call, the ``CALL`` that
    follows it is passed over too)."""
    lasti = frame.f_lasti
    op = frame.f_code.co_code[lasti]
    offset = lasti + 2 + 2 * cache_entries(dis.opname[op])
    if op == _PRECALL:
        offset += 2 + 2 * cache_entries("CALL")
    return offset


def reaches(callee: FrameType, caller: FrameType) -> bool:
    """Whether ``caller`` waits on ``callee`` with no state in C between them: a direct call
    (:func:`direct_caller`), or one that C only forwards (:func:`forwarded_call_depth`)."""
    return direct_caller(callee, caller) or forwarded_call_depth(callee, caller) is not None


def forwarded_continuation(frame: FrameType) -> int:
    """Where a frame waiting on a forwarded call (:func:`forwarded_call_depth`) continues: the
    instruction after the call and its cache entries (its ``f_lasti`` is the call itself)."""
    lasti = frame.f_lasti
    op = frame.f_code.co_code[lasti]
    caches = 0 if op == _CALL_FUNCTION_EX else cache_entries(dis.opname[op])
    return lasti + 2 + 2 * caches


def _calls_code(target: object, code: CodeType) -> bool:
    if isinstance(target, MethodType):
        target = target.__func__
    return isinstance(target, FunctionType) and target.__code__ is code


def _partial_calls_code(target: object, code: CodeType) -> bool:
    """A ``functools.partial`` (exactly; a subclass may add a ``__call__``) of the function (or
    a method bound to it) whose code ``code`` is: C that only merges the stored arguments with
    the call's and returns what the function returns (``find_executable_batch_size`` wraps
    Hugging Face's training loop in one)."""
    return type(target) is functools.partial and _calls_code(target.func, code)


def continuation_offset(frame: FrameType, *, innermost: bool) -> int:
    """Byte offset where ``frame`` continues: the next instruction for the paused frame, the
    instruction after the pending call for a frame waiting on its callee."""
    lasti = frame.f_lasti
    if innermost:
        return lasti
    layout = _layout()
    if layout.return_offset is None:  # 3.11: f_lasti is the call's last cache unit
        return lasti + 2
    return_offset = ctypes.c_uint16.from_address(_iframe(frame) + layout.return_offset).value
    if sys.version_info[:2] == (3, 12):  # f_lasti is the call's last cache unit
        return lasti + 2 + 2 * return_offset
    return lasti + 2 * return_offset  # 3.13: the instruction pointer is at the call itself


def read_slots_and_stack(
    frame: FrameType, depth: int | None = None
) -> tuple[list[object], list[object]]:
    """The frame's ``localsplus`` slots and its value stack, with :data:`NULL` for empty ones.

    ``stacktop`` is valid for the paused frame (synced before a line callback) and for frames
    waiting on an inlined call (saved at the call); a frame waiting on a call through C passes
    its ``depth`` (:func:`forwarded_call_depth`) instead.
    """
    layout = _layout()
    base = _iframe(frame)
    nslots = local_slot_count(frame.f_code)
    if depth is None:
        stacktop = ctypes.c_int.from_address(base + layout.stacktop).value
    else:
        stacktop = nslots + depth
    if not nslots <= stacktop <= nslots + frame.f_code.co_stacksize:
        raise RuntimeError(
            f"frame {frame.f_code.co_qualname} has no valid stack pointer ({stacktop})"
        )
    values: list[object] = []
    first = base + layout.localsplus
    for i in range(stacktop):
        address = first + i * _PTR
        if ctypes.c_void_p.from_address(address).value:
            values.append(ctypes.py_object.from_address(address).value)
        else:
            values.append(NULL)
    return values[:nslots], values[nslots:]


def slot_address(frame: FrameType, index: int) -> int | None:
    """The address of the object in ``frame``'s ``localsplus`` slot ``index`` (a local, a cell
    or, past them, a value-stack entry): 0 for an empty slot, None past the stack's top. Valid
    where :func:`read_slots_and_stack` is (the frame at its own line event); one read, so a
    pending pause can ask it at every line of a frame cheaply."""
    layout = _layout()
    base = _iframe(frame)
    if index >= ctypes.c_int.from_address(base + layout.stacktop).value:
        return None
    return ctypes.c_void_p.from_address(base + layout.localsplus + index * _PTR).value or 0


def in_loop(code: CodeType, offset: int) -> bool:
    """Whether the instruction at ``offset`` lies inside a loop of ``code`` (``for`` or
    ``while``: between a backward jump's target and the jump itself)."""
    cached = _loops_cache.get(id(code))
    if cached is None or cached[0] is not code:
        ranges = tuple(
            (int(i.argval), i.offset)
            for i in dis.get_instructions(code)
            if i.opcode in _LOOP_JUMPS and isinstance(i.argval, int)
        )
        cached = _loops_cache[id(code)] = (code, ranges)
    return any(start <= offset <= end for start, end in cached[1])
