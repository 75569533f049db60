"""Bytecode building for resume: the prologue, the exception table and the location table.

A paused frame continues in a new process as a new code object whose ``co_code`` is a short
prologue followed by the *original* bytes. In CPython 3.11-3.13 every jump is relative, so the
original instructions keep their encoding and every offset shifts by exactly the prologue's
length ``P``; only the two side tables (exceptions, locations) need rewriting. The prologue:

1. ``RESUME 0`` (the function-start instruction the original code would have run);
2. ``LOAD_CONST value; STORE_FAST slot`` for each saved local, cell and free variable (cells are
   stored as the cell objects themselves, so closures keep sharing them), ``DELETE_FAST`` for a
   slot that was unbound but received a dummy argument;
3. the saved value stack (``LOAD_CONST`` / ``PUSH_NULL``);
4. outer frames only: a call of the inner frame's resumed function with no arguments, so its
   return value lands on the stack exactly where the original call's result would have;
5. ``JUMP_FORWARD`` to where the original code continues.
"""

from __future__ import annotations

import dis
import opcode
import sys
from collections.abc import Sequence
from types import CodeType
from typing import Final, NamedTuple

__all__ = [
    "ExceptionEntry",
    "Position",
    "ResumedCode",
    "build_resumed_code",
    "cache_entries",
    "decode_exception_table",
    "encode_exception_table",
    "encode_locations",
    "instruction_starts",
    "yield_offset",
]

PY: Final = sys.version_info[:2]
_OP: Final = dis.opmap
_EXTENDED_ARG: Final = _OP["EXTENDED_ARG"]

Position = tuple[int | None, int | None, int | None, int | None]
_NO_POSITION: Final[Position] = (None, None, None, None)


class _NullMarker:
    """Stands for an empty (NULL) slot of a frame: an unbound local or a NULL on the stack.

    Pickled by reference, so it stays a singleton across processes.
    """

    _instance: _NullMarker | None = None

    def __new__(cls) -> _NullMarker:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NULL"

    def __reduce__(self) -> str:
        return "NULL"


NULL: Final = _NullMarker()


def cache_entries(name: str) -> int:
    """How many inline cache code units follow instruction ``name`` (0 for most)."""
    table = opcode._inline_cache_entries  # type: ignore[attr-defined]
    if isinstance(table, dict):  # 3.13: keyed by name
        return int(table.get(name, 0))
    return int(table[_OP[name]])


def instruction_starts(code: bytes) -> list[int]:
    """Byte offsets where instructions start (EXTENDED_ARG prefixes count as their own)."""
    starts = []
    i = 0
    names = dis.opname
    while i < len(code):
        starts.append(i)
        i += 2 + 2 * cache_entries(names[code[i]]) if not names[code[i]].startswith("<") else 2
    return starts


# --- exception table -------------------------------------------------------------------------


class ExceptionEntry(NamedTuple):
    """One exception-table row, in byte offsets (``end`` exclusive)."""

    start: int
    end: int
    target: int
    depth: int
    lasti: bool


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    b = data[pos]
    pos += 1
    value = b & 63
    while b & 64:
        b = data[pos]
        pos += 1
        value = (value << 6) | (b & 63)
    return value, pos


def decode_exception_table(table: bytes) -> list[ExceptionEntry]:
    """Parse ``co_exceptiontable``: big-endian 6-bit varints, 0x80 marks an entry's start."""
    entries = []
    pos = 0
    while pos < len(table):
        start, pos = _read_varint(table, pos)
        size, pos = _read_varint(table, pos)
        target, pos = _read_varint(table, pos)
        depth_lasti, pos = _read_varint(table, pos)
        entries.append(
            ExceptionEntry(
                start * 2, (start + size) * 2, target * 2, depth_lasti >> 1, bool(depth_lasti & 1)
            )
        )
    return entries


def _write_varint(out: bytearray, value: int, first: bool) -> None:
    chunks = [value & 63]
    value >>= 6
    while value:
        chunks.append(value & 63)
        value >>= 6
    chunks.reverse()
    encoded = [c | 64 for c in chunks[:-1]] + [chunks[-1]]
    if first:
        encoded[0] |= 128
    out.extend(encoded)


def encode_exception_table(entries: Sequence[ExceptionEntry]) -> bytes:
    """Inverse of :func:`decode_exception_table`."""
    out = bytearray()
    for e in entries:
        if e.end <= e.start or e.start % 2 or e.end % 2 or e.target % 2:
            raise ValueError(f"malformed exception-table entry {e}")
        _write_varint(out, e.start // 2, True)
        _write_varint(out, (e.end - e.start) // 2, False)
        _write_varint(out, e.target // 2, False)
        _write_varint(out, (e.depth << 1) | int(e.lasti), False)
    return bytes(out)


def covering_entry(entries: Sequence[ExceptionEntry], offset: int) -> ExceptionEntry | None:
    """The entry whose range holds ``offset``, if any (ranges never overlap)."""
    for e in entries:
        if e.start <= offset < e.end:
            return e
    return None


# --- location table --------------------------------------------------------------------------


def _write_loc_varint(out: bytearray, value: int) -> None:
    while value >= 64:
        out.append(64 | (value & 63))
        value >>= 6
    out.append(value)


def _write_loc_svarint(out: bytearray, value: int) -> None:
    _write_loc_varint(out, ((-value) << 1) | 1 if value < 0 else value << 1)


_LOC_NO_COLUMNS: Final = 13
_LOC_LONG: Final = 14
_LOC_NONE: Final = 15


def encode_locations(firstlineno: int, positions: Sequence[Position]) -> bytes:
    """Encode one position per code unit as a ``co_linetable`` (PEP 626/657 format).

    Only the long, no-columns and no-location forms are used: always valid, a little larger than
    the compiler's table, and what :meth:`CodeType.co_positions` reads back is what went in.
    """
    out = bytearray()
    line = firstlineno
    i = 0
    n = len(positions)
    while i < n:
        pos = positions[i]
        j = i + 1
        while j < n and j - i < 8 and positions[j] == pos:
            j += 1
        length = j - i
        start, end, col, end_col = pos
        if start is None:
            out.append(0x80 | (_LOC_NONE << 3) | (length - 1))
        elif end is None or col is None or end_col is None or end < start:
            out.append(0x80 | (_LOC_NO_COLUMNS << 3) | (length - 1))
            _write_loc_svarint(out, start - line)
            line = start
        else:
            out.append(0x80 | (_LOC_LONG << 3) | (length - 1))
            _write_loc_svarint(out, start - line)
            _write_loc_varint(out, end - start)
            _write_loc_varint(out, col + 1)
            _write_loc_varint(out, end_col + 1)
            line = start
        i = j
    return bytes(out)


# --- prologue --------------------------------------------------------------------------------


class ResumedCode(NamedTuple):
    """A resumed code object and how it maps back to its original."""

    code: CodeType
    prologue: int  # bytes prepended; original offset = resumed offset - prologue
    call_end: int  # offset just after the prologue's call (== where the JUMP starts); 0 if none


class _Assembler:
    def __init__(self, consts: list[object]) -> None:
        self.code = bytearray()
        self.positions: list[Position] = []
        self.consts = consts
        self._const_index: dict[int, int] = {}

    def emit(self, name: str, arg: int = 0, position: Position = _NO_POSITION) -> None:
        ext = []
        high = arg >> 8
        while high:
            ext.append(high & 0xFF)
            high >>= 8
        for b in reversed(ext):
            self.code += bytes((_EXTENDED_ARG, b))
        self.code += bytes((_OP[name], arg & 0xFF))
        caches = cache_entries(name)
        self.code += b"\x00\x00" * caches
        self.positions.extend([position] * (len(ext) + 1 + caches))

    def const(self, value: object) -> int:
        # By identity: equal-but-distinct values must stay distinct objects in the new frame.
        index = self._const_index.get(id(value))
        if index is None:
            index = len(self.consts)
            self.consts.append(value)
            self._const_index[id(value)] = index
        return index


def build_resumed_code(
    code: CodeType,
    *,
    slots: Sequence[object],
    stack: Sequence[object],
    resume_at: int,
    call: object | None = None,
    call_at: int | None = None,
    prefilled: int = 0,
    generator: bool = False,
    at_yield: bool = False,
) -> ResumedCode:
    """A code object that restores ``slots`` and ``stack`` and continues ``code`` at ``resume_at``.

    :param slots: one value per ``localsplus`` slot (locals, cells, free variables); :data:`NULL`
        for an unbound slot. Cell and free slots hold the cell objects.
    :param stack: the frame's value stack, bottom first; :data:`NULL` for a NULL entry.
    :param resume_at: byte offset in ``code`` of the next instruction to run.
    :param call: for an outer frame, the callable (the inner frame's resumed function) whose
        return value is what the original call at ``call_at`` was waiting for.
    :param call_at: byte offset of that original call instruction: its exception-table entry is
        copied to the prologue's call so an enclosing ``try``/``with`` still catches what the
        callee raises, and its position is the prologue call's, so tracebacks stay right.
    :param prefilled: how many leading slots the call fills with dummy arguments: an unbound one
        among them is cleared with ``DELETE_FAST``.
    :param generator: ``code`` is a generator function's: the prologue starts as its own does
        (``RETURN_GENERATOR; POP_TOP``), so calling the function makes a generator that has not
        started, and the slots are restored when it first runs.
    :param at_yield: for a generator suspended at a ``yield``: ``resume_at`` is that
        ``YIELD_VALUE``, and the prologue pushes ``None`` after the saved stack and jumps to it.
        Advanced once (see :mod:`portal.capture.generators`), the new generator yields that
        ``None`` from the original instruction and is then suspended where the old one was, at
        the same instruction with the same stack: ``send``, ``throw`` and ``close`` meet the
        same exception-table entries, and inside ``yield from`` the interpreter finds the
        ``SEND`` before it and the sub-iterator on the stack, as it expects.
    """
    if resume_at % 2 or not 0 <= resume_at < len(code.co_code):
        raise ValueError(f"resume offset {resume_at} is outside {code.co_name}'s bytecode")
    original = code.co_code
    positions = list(code.co_positions())
    asm = _Assembler(list(code.co_consts))
    if generator:
        asm.emit("RETURN_GENERATOR")
        asm.emit("POP_TOP")
    asm.emit("RESUME", 0)
    for index, value in enumerate(slots):
        if value is NULL:
            if index < prefilled:
                asm.emit("DELETE_FAST", index)
            continue
        asm.emit("LOAD_CONST", asm.const(value))
        asm.emit("STORE_FAST", index)
    for value in stack:
        if value is NULL:
            asm.emit("PUSH_NULL")
        else:
            asm.emit("LOAD_CONST", asm.const(value))

    call_end = 0
    call_entry: ExceptionEntry | None = None
    entries = decode_exception_table(code.co_exceptiontable)
    jump_position = _NO_POSITION
    if at_yield:
        if not generator or call is not None or dis.opname[original[resume_at]] != "YIELD_VALUE":
            raise ValueError(f"no yield of a generator at offset {resume_at}")
        asm.emit("LOAD_CONST", asm.const(None))  # what the original YIELD_VALUE yields once
    if call is not None:
        if call_at is None:
            raise ValueError("an outer frame needs the offset of its original call")
        call_position = _position_of_instruction(original, positions, call_at)
        fn = asm.const(call)
        # The copied entry starts at the callable's load: 3.13 looks a caller's handler up at the
        # code unit *before* its instruction pointer (which sits on the CALL).
        call_start = len(asm.code)
        if PY >= (3, 13):
            asm.emit("LOAD_CONST", fn)
            asm.emit("PUSH_NULL")
        else:
            asm.emit("PUSH_NULL")
            asm.emit("LOAD_CONST", fn)
        if PY == (3, 11):
            asm.emit("PRECALL", 0, call_position)
        asm.emit("CALL", 0, call_position)
        call_end = len(asm.code)
        original_entry = covering_entry(entries, call_at)
        if original_entry is not None:
            call_entry = original_entry._replace(start=call_start, end=call_end)
        # Same line as the call: no new line event fires between the call and the continuation.
        jump_position = call_position

    # The jump is last, so its distance is the continuation's offset in the original code.
    asm.emit("JUMP_FORWARD", resume_at // 2, jump_position)
    prologue = len(asm.code)

    shifted = [
        e._replace(start=e.start + prologue, end=e.end + prologue, target=e.target + prologue)
        for e in entries
    ]
    if call_entry is not None:
        shifted.insert(0, call_entry._replace(target=call_entry.target + prologue))

    needed_stack = len(stack) + 3
    new_code = code.replace(
        co_code=bytes(asm.code) + original,
        co_consts=tuple(asm.consts),
        co_stacksize=max(code.co_stacksize, needed_stack),
        co_linetable=encode_locations(code.co_firstlineno, asm.positions + positions),
        co_exceptiontable=encode_exception_table(shifted),
    )
    return ResumedCode(new_code, prologue, call_end)


def yield_offset(code: CodeType, lasti: int) -> int:
    """The offset of the ``YIELD_VALUE`` a suspended generator of ``code`` waits at, from its
    frame's ``f_lasti`` (3.11 and 3.12 point at the ``YIELD_VALUE``, 3.13 at the ``RESUME``
    after it)."""
    raw = code.co_code
    if dis.opname[raw[lasti]] == "YIELD_VALUE":
        return lasti
    if lasti >= 2 and dis.opname[raw[lasti - 2]] == "YIELD_VALUE":
        return lasti - 2
    raise ValueError(f"{code.co_qualname} is not suspended at a yield (offset {lasti})")


def _position_of_instruction(code: bytes, positions: Sequence[Position], offset: int) -> Position:
    """The source position of the instruction that holds byte ``offset`` (maybe a cache unit)."""
    start = 0
    for s in instruction_starts(code):
        if s > offset:
            break
        start = s
    return positions[start // 2]
