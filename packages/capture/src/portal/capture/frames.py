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
import sys
from types import CodeType, FrameType
from typing import Final, NamedTuple

from portal.capture.codegen import NULL

__all__ = [
    "LAYOUT",
    "FrameLayout",
    "continuation_offset",
    "direct_caller",
    "local_slot_count",
    "read_slots_and_stack",
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
_PTR: Final = ctypes.sizeof(ctypes.c_void_p)

LAYOUT: Final = _LAYOUTS.get(sys.version_info[:2])

_nlocalsplus_cache: dict[int, tuple[CodeType, int]] = {}


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


def read_slots_and_stack(frame: FrameType) -> tuple[list[object], list[object]]:
    """The frame's ``localsplus`` slots and its value stack, with :data:`NULL` for empty ones.

    ``stacktop`` is valid for the paused frame (synced before a line callback) and for frames
    waiting on a call (saved at the inlined call).
    """
    layout = _layout()
    base = _iframe(frame)
    nslots = local_slot_count(frame.f_code)
    stacktop = ctypes.c_int.from_address(base + layout.stacktop).value
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
