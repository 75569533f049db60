"""Unit tests of the bytecode side tables and the prologue builder (in process, no pause)."""

from __future__ import annotations

import dis
import json
import sys
import types

from hypothesis import given
from hypothesis import strategies as st

from portal.capture import codegen
from portal.capture.codegen import NULL, ExceptionEntry, build_resumed_code


def _line_map(code: types.CodeType) -> list[int | None]:
    lines: list[int | None] = [None] * (len(code.co_code) // 2)
    for start, end, line in code.co_lines():
        for unit in range(start // 2, end // 2):
            lines[unit] = line
    return lines


def _stdlib_codes() -> list[types.CodeType]:
    codes = []
    for module in (json, dis, codegen):
        for value in vars(module).values():
            if isinstance(value, types.FunctionType):
                codes.append(value.__code__)
            elif isinstance(value, type):
                codes += [
                    f.__code__ for f in vars(value).values() if isinstance(f, types.FunctionType)
                ]
    return codes


def test_exception_table_round_trips_real_code() -> None:
    codes = _stdlib_codes()
    assert any(c.co_exceptiontable for c in codes)
    for code in codes:
        entries = codegen.decode_exception_table(code.co_exceptiontable)
        assert codegen.encode_exception_table(entries) == code.co_exceptiontable


@st.composite
def _entries(draw: st.DrawFn) -> list[ExceptionEntry]:
    cursor = 0
    out = []
    for _ in range(draw(st.integers(0, 8))):
        start = cursor + 2 * draw(st.integers(0, 5000))
        end = start + 2 * draw(st.integers(1, 70000))
        out.append(
            ExceptionEntry(
                start,
                end,
                2 * draw(st.integers(0, 1 << 20)),
                draw(st.integers(0, 300)),
                draw(st.booleans()),
            )
        )
        cursor = end
    return out


@given(_entries())
def test_exception_table_encoding_is_inverse_of_decoding(entries: list[ExceptionEntry]) -> None:
    encoded = codegen.encode_exception_table(entries)
    assert codegen.decode_exception_table(encoded) == entries
    starts = [i for i, b in enumerate(encoded) if b & 0x80]
    assert len(starts) == len(entries)  # the 0x80 bit marks exactly the entries' first bytes


def test_matches_dis_parser() -> None:
    def f() -> int:
        try:
            with open(__file__):
                return 1
        except OSError:
            return 2

    ours = codegen.decode_exception_table(f.__code__.co_exceptiontable)
    theirs = dis._parse_exception_table(f.__code__)  # type: ignore[attr-defined]
    assert [(e.start, e.target, e.depth, e.lasti) for e in ours] == [
        (e.start, e.target, e.depth, e.lasti) for e in theirs
    ]


def test_location_table_round_trips_positions_and_lines() -> None:
    for code in _stdlib_codes():
        table = codegen.encode_locations(code.co_firstlineno, list(code.co_positions()))
        copy = code.replace(co_linetable=table)
        assert list(copy.co_positions()) == list(code.co_positions())
        assert _line_map(copy) == _line_map(code)


def _offset_of_line(code: types.CodeType, line: int) -> int:
    return min(start for start, _end, ln in code.co_lines() if ln == line)


def _loop(n):  # type: ignore[no-untyped-def]
    total = 0
    for i in range(n):
        total += i
    return total


def test_prologue_restores_locals_and_a_loop_iterator() -> None:
    code = _loop.__code__
    body = _offset_of_line(code, code.co_firstlineno + 3)
    it = iter(range(10))
    for _ in range(3):
        next(it)  # the loop has taken 0, 1, 2 and is about to add 2
    resumed = build_resumed_code(
        code, slots=[10, 0 + 1, 2], stack=[it], resume_at=body, prefilled=1
    )
    fn = types.FunctionType(resumed.code, globals(), "_loop", (None,))
    assert fn() == sum(range(10))
    assert resumed.code.co_code.endswith(code.co_code)
    assert resumed.prologue == len(resumed.code.co_code) - len(code.co_code)


def test_prologue_clears_an_unbound_argument() -> None:
    def f(a, b):  # type: ignore[no-untyped-def]
        x = 1
        return (a, x) if "b" not in dir() else ("b bound", x)

    # Continue at the first line with `b` deleted: the dummy argument must be cleared.
    start = _offset_of_line(f.__code__, f.__code__.co_firstlineno + 1)
    resumed = build_resumed_code(
        f.__code__, slots=["A", NULL, NULL], stack=[], resume_at=start, prefilled=2
    )
    fn = types.FunctionType(resumed.code, {"dir": dir}, "f", (None, None))
    assert fn() == ("A", 1)


def _caller_of(g):  # type: ignore[no-untyped-def]
    try:
        value = g()
    except KeyError:
        return "caught"
    return value + 1


def _call_site(code: types.CodeType) -> tuple[int, int]:
    """(offset of the CALL, offset where execution continues after it)."""
    instructions = list(dis.get_instructions(code))
    for i, ins in enumerate(instructions):
        if ins.opname == "CALL":
            return ins.offset, instructions[i + 1].offset
    raise AssertionError("no CALL")


def test_outer_prologue_calls_inner_and_keeps_its_try_block() -> None:
    code = _caller_of.__code__
    call_at, after = _call_site(code)
    resumed = build_resumed_code(
        code,
        slots=[None, NULL],
        stack=[],
        resume_at=after,
        call=lambda: 41,
        call_at=call_at,
        prefilled=1,
    )
    assert types.FunctionType(resumed.code, globals(), "_caller_of", (None,))() == 42

    def raises():  # type: ignore[no-untyped-def]
        raise KeyError("x")

    resumed = build_resumed_code(
        code,
        slots=[None, NULL],
        stack=[],
        resume_at=after,
        call=raises,
        call_at=call_at,
        prefilled=1,
    )
    assert types.FunctionType(resumed.code, globals(), "_caller_of", (None,))() == "caught"


def test_traceback_through_the_prologue_points_at_the_original_call() -> None:
    def calls(g):  # type: ignore[no-untyped-def]
        return g()

    call_at, after = _call_site(calls.__code__)

    def boom():  # type: ignore[no-untyped-def]
        raise RuntimeError

    resumed = build_resumed_code(
        calls.__code__,
        slots=[None],
        stack=[],
        resume_at=after,
        call=boom,
        call_at=call_at,
        prefilled=1,
    )
    fn = types.FunctionType(resumed.code, globals(), "calls", (None,))
    try:
        fn()
    except RuntimeError as exc:
        tb = exc.__traceback__
        assert tb is not None and tb.tb_next is not None
        assert tb.tb_next.tb_lineno == calls.__code__.co_firstlineno + 1
    else:
        raise AssertionError("no exception")


def test_large_constant_indexes_use_extended_args() -> None:
    values = list(range(300))
    code = _loop.__code__
    body = _offset_of_line(code, code.co_firstlineno + 3)
    # 300 distinct constants on the stack under the iterator would not be a real frame; instead
    # pad the consts tuple so our constants get indexes above 255.
    padded = code.replace(co_consts=code.co_consts + tuple(object() for _ in values))
    it = iter(range(3))
    next(it)
    resumed = build_resumed_code(padded, slots=[3, 0, 0], stack=[it], resume_at=body, prefilled=1)
    assert any(
        op == dis.opmap["EXTENDED_ARG"] for op in resumed.code.co_code[: resumed.prologue : 2]
    )
    assert types.FunctionType(resumed.code, globals(), "_loop", (None,))() == 3


def test_cache_entries_known_for_call() -> None:
    assert (
        codegen.cache_entries("CALL") == {(3, 11): 4, (3, 12): 3, (3, 13): 3}[sys.version_info[:2]]
    )
