"""What stands between a program and a checkpoint, as structured values.

A :class:`Problem` names the value as the script knows it (``digest``, ``self.conn``,
``state["fh"]``), its type, why it cannot be carried (the serializer's own words) and where the
pause was tried (``train.py:42 in train``). ``kind`` tells a value the checkpoint cannot carry
(``"value"``) from a position the pause cannot be taken at (``"position"``: an exception handler, a
generator partway, a call through C), which only delays the pause.
"""

from __future__ import annotations

import os
from types import FrameType
from typing import Any, Literal

import attrs

__all__ = ["Problem", "describe_type", "where"]

ProblemKind = Literal["value", "position"]


@attrs.frozen(kw_only=True)
class Problem:
    """One reason a checkpoint cannot be taken now."""

    name: str
    type_name: str
    reason: str
    where: str
    kind: ProblemKind = "value"

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (events, checkpoint headers)."""
        return attrs.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Problem:
        return cls(
            **{k: data[k] for k in ("name", "type_name", "reason", "where") if k in data},
            kind=data.get("kind", "value"),
        )

    def __str__(self) -> str:
        return f"{self.name} ({self.type_name}: {self.reason}) at {self.where}"


def describe_type(value: object) -> str:
    """``module.QualName`` of ``value``'s type (``builtins.`` left out)."""
    t = type(value)
    module = getattr(t, "__module__", None)
    name = getattr(t, "__qualname__", t.__name__)
    return name if module in (None, "builtins") else f"{module}.{name}"


def where(frame: FrameType) -> str:
    """``file.py:LINE in function``, as a problem's location."""
    code = frame.f_code
    return f"{os.path.basename(code.co_filename)}:{frame.f_lineno} in {code.co_name}"
