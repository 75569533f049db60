"""The value-stack depth before each instruction of a code object, found from the bytecode.

A frame waiting on a call the interpreter made through C (on 3.11 every ``f(*args)``; on 3.12
and 3.13 ``obj.method(*args)``) has no saved stack pointer: the eval loop keeps it in a C local
until the call returns. The depth is nevertheless fixed by the bytecode, as the compiler itself
computes ``co_stacksize``: a walk of every path from the first instruction and from each
exception handler, adding each instruction's stack effect. A code object whose paths disagree
(never seen for compiler output) gets no depths at all, so a caller treats its frames as it did
before: the call is one through C, with no safe point inside it.
"""

from __future__ import annotations

import dis
import itertools
from types import CodeType
from typing import Final

from portal.capture.codegen import decode_exception_table

__all__ = ["depth_before"]

_JUMPS: Final = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)
#: Instructions after which control does not fall through to the next one.
_NO_FALLTHROUGH: Final = frozenset(
    dis.opmap[name]
    for name in (
        "RETURN_VALUE",
        "RETURN_CONST",
        "RAISE_VARARGS",
        "RERAISE",
        "JUMP_FORWARD",
        "JUMP_BACKWARD",
        "JUMP_BACKWARD_NO_INTERRUPT",
        "JUMP",
        "JUMP_NO_INTERRUPT",
        "JUMP_ABSOLUTE",
    )
    if name in dis.opmap
)

_cache: dict[int, tuple[CodeType, dict[int, int] | None]] = {}


def depth_before(code: CodeType, offset: int) -> int | None:
    """The stack depth just before the instruction at byte ``offset`` runs, or None when it is
    not known (an unreachable offset, or a code object the walk cannot settle)."""
    cached = _cache.get(id(code))
    if cached is None or cached[0] is not code:
        cached = (code, _depths(code))
        _cache[id(code)] = cached
    depths = cached[1]
    return None if depths is None else depths.get(offset)


def _depths(code: CodeType) -> dict[int, int] | None:
    instructions = {i.offset: i for i in dis.get_instructions(code)}
    order = sorted(instructions)
    following = dict(itertools.pairwise(order))
    depths: dict[int, int] = {}
    pending: list[tuple[int, int]] = [(0, 0)]
    for entry in decode_exception_table(code.co_exceptiontable):
        # The handler starts with the stack cut to the entry's depth, then (with lasti) the
        # offset of the raising instruction, then the exception.
        pending.append((entry.target, entry.depth + int(entry.lasti) + 1))
    while pending:
        offset, depth = pending.pop()
        while True:
            known = depths.get(offset)
            if known is not None:
                if known != depth:
                    return None
                break
            instruction = instructions.get(offset)
            if instruction is None or depth < 0:
                return None
            depths[offset] = depth
            op, arg = instruction.opcode, instruction.arg
            if op in _JUMPS and isinstance(instruction.argval, int):
                try:
                    taken = depth + dis.stack_effect(op, arg, jump=True)
                except ValueError:
                    return None
                pending.append((_jump_target(instruction), taken))
            if op in _NO_FALLTHROUGH:
                break
            try:
                depth += _effect(op, arg)
            except ValueError:
                return None
            next_offset = following.get(offset)
            if next_offset is None:
                break
            offset = next_offset
    return depths


_RETURN_GENERATOR: Final = dis.opmap["RETURN_GENERATOR"]


def _effect(op: int, arg: int | None) -> int:
    if op == _RETURN_GENERATOR:
        # What the first send() pushes, popped by the POP_TOP after it (3.11 and 3.12 count it
        # as 0: their compiler adds the generator prefix after computing the stack size).
        return 1
    return dis.stack_effect(op, arg, jump=False)


def _jump_target(instruction: dis.Instruction) -> int:
    target = getattr(instruction, "jump_target", None)  # 3.13
    return int(target if target is not None else instruction.argval)
