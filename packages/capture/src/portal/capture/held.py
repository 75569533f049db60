"""Values a frame of the paused chain holds that a checkpoint cannot carry, watched cheaply.

A pause that fails because of such a value (tokenize's generator on pycodestyle's
``check_all`` stack while it reads a file; a socket in ``train()``'s local) cannot succeed until
that frame lets go of it: the slot holds another object, the stack is popped below it, or the
frame returns. Trying again on a timer at random lines almost never meets the short moment
between two files, and line events in every frame inside it slow the program many times over.
So the engine narrows line events to the holding frame and those outside it
(:meth:`portal.capture.safepoint.LineEvents.narrow`) and, at each of their lines, asks
:meth:`HeldValues.gone`: one pointer read for the holding frame's own lines. The pause is then
tried at the first line after the value has left, and the program runs at full speed meanwhile.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import FrameType
from typing import NamedTuple

from portal.capture import frames as _frames

__all__ = ["HeldSlot", "HeldValues"]


class HeldSlot(NamedTuple):
    frame: FrameType
    #: Index into the frame's ``localsplus``: its locals and cells, then its value stack.
    slot: int
    #: ``id()`` of the value that failed (compared, never dereferenced).
    address: int


class HeldValues:
    """The slots holding the values that failed; :attr:`holder` is the innermost such frame."""

    __slots__ = ("holder", "slots")

    def __init__(self, slots: Sequence[HeldSlot], chain: Sequence[FrameType]) -> None:
        self.slots = tuple(slots)
        holders = {id(s.frame) for s in self.slots}
        self.holder = next(f for f in chain if id(f) in holders)  # chain: innermost first

    def gone(self, frame: FrameType) -> bool:
        """Whether, at a line of ``frame`` (the holding frame or one outside it), some value
        that failed is no longer held: the pause could pass now."""
        for slot in self.slots:
            if slot.frame is frame:
                if _frames.slot_address(frame, slot.slot) != slot.address:
                    return True
            elif not _on_stack(slot.frame, frame):
                return True  # its frame has returned
        return False


def _on_stack(target: FrameType, frame: FrameType | None) -> bool:
    while frame is not None:
        if frame is target:
            return True
        frame = frame.f_back
    return False
