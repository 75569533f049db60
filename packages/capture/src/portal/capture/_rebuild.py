"""Functions a checkpoint's pickle calls while loading. Their names are part of the stored
format: rename none of them (old checkpoints name them)."""

from __future__ import annotations

import builtins
import marshal
import sys
import types
from typing import Any

from portal.capture import caches

__all__ = [
    "load_code",
    "lru_cache",
    "make_cell",
    "make_function",
    "module_namespace",
    "set_cell",
    "set_function_state",
    "set_wrapper_state",
    "std_stream",
    "user_module",
]


def make_cell() -> types.CellType:
    """An empty cell; its contents are set afterwards, so a cell may (indirectly) hold itself."""
    return types.CellType()


def set_cell(cell: types.CellType, state: tuple[Any]) -> None:
    cell.cell_contents = state[0]


def user_module(name: str) -> types.ModuleType:
    """A user module, created empty before the pickle loads and filled from it afterwards."""
    return sys.modules[name]


def module_namespace(name: str) -> dict[str, Any]:
    """The namespace of a user module (or ``__main__``) of the resumed process."""
    return sys.modules[name].__dict__


def load_code(data: bytes) -> types.CodeType:
    code = marshal.loads(data)
    if not isinstance(code, types.CodeType):
        raise TypeError("checkpoint holds a code record that is not a code object")
    return code


def make_function(
    code: types.CodeType,
    globals_: dict[str, Any],
    name: str,
    closure: tuple[types.CellType, ...] | None,
) -> types.FunctionType:
    globals_.setdefault("__builtins__", builtins)
    return types.FunctionType(code, globals_, name, None, closure)


def set_function_state(func: types.FunctionType, state: dict[str, Any]) -> None:
    attrs = state.pop("__dict__", None)
    for key, value in state.items():
        setattr(func, key, value)
    if attrs:
        func.__dict__.update(attrs)


def lru_cache(func: Any, maxsize: int | None, typed: bool) -> Any:
    """An ``functools.lru_cache`` wrapper around ``func`` (checkpoints made before caches were
    carried name this; newer ones name :func:`portal.capture.caches.rebuild_lru_cache`)."""
    return caches.rebuild_lru_cache(func, maxsize, typed)


def set_wrapper_state(wrapper: Any, state: dict[str, Any]) -> None:
    """The wrapper's attributes, from a checkpoint made before caches were carried (its cache
    comes back empty); newer ones name :func:`portal.capture.caches.restore_lru_cache`."""
    caches.restore_wrapper_attributes(wrapper, state)


def std_stream(name: str) -> Any:
    """``sys.stdout`` and friends of the resumed process (a stream is the process's own)."""
    return getattr(sys, name)
