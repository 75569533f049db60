"""What stands between a program and a checkpoint, as structured values.

A :class:`Problem` names the value as the script knows it (``digest``, ``self.conn``,
``state["fh"]``), its type, why it cannot be carried (the serializer's own words) and where the
pause was tried (``train.py:42 in train``). ``kind`` tells a value the checkpoint cannot carry
(``"value"``) from a position the pause cannot be taken at (``"position"``: an exception handler, a
generator partway, a call through C), which only delays the pause.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import CodeType, FrameType
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


def where(frame: FrameType, is_user_code: Callable[[CodeType], bool] | None = None) -> str:
    """``file.py:LINE in function``, as a problem's location. With ``is_user_code``, a library's
    frame also names the script's line it runs under (``trainer.py:2334 in
    get_batch_samples, under train.py:42``): the line the user wrote, ``trainer.train()``."""
    code = frame.f_code
    text = f"{os.path.basename(code.co_filename)}:{frame.f_lineno} in {code.co_name}"
    if is_user_code is None or is_user_code(code):
        return text
    outer = frame.f_back
    while outer is not None and not is_user_code(outer.f_code):
        outer = outer.f_back
    if outer is None:
        return text
    return f"{text}, under {os.path.basename(outer.f_code.co_filename)}:{outer.f_lineno}"
