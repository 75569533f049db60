"""A module-level object of the program's (a context, a registry, a config) loads *progressively*:
set as its module's global the moment it is made, then given its attributes one by one, in the
order the program gave them, each as soon as it has loaded.

Such an object is often reached through a cycle: mpmath's context ``mp`` holds its classes, each
class holds ``mp`` (``mpf.context``), and ``mp``'s caches hold constants whose ``__hash__`` reads
``self.context._prec_rounding``. Pickle sets an object's state in one step once *all* of it has
loaded (BUILD), so while its caches load, ``mp`` has no attribute at all and the hash fails
(``'MPContext' object has no attribute '_prec_rounding'``); code that imports the global while the
state loads (``from mpmath import mp``) finds nothing. Loaded progressively, the attributes the
program set first (in ``__init__``, before it filled any cache) are there when the later ones need
them, as they were when the program made them, and the global is there from the start.

Only for the globals of the program's own modules that are instances (not classes, functions,
modules or constants, which :mod:`portal.capture.namespaces` sets first anyway), and only where
the state is the plain one pickle would set itself (a ``__dict__`` and slots, no ``__setstate__``
nor custom state setter): those are few, so the pickle grows by a few records per attribute of a
handful of objects. Any other object loads as before.

The functions the pickle names (in :mod:`portal.capture._rebuild`) are part of the checkpoint
format.
"""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from portal.capture import _rebuild, rawstate

__all__ = ["GlobalPlaces", "Place", "global_places", "progressive"]

#: Where a global lives: ``(module name, global name)``.
Place = tuple[str, str]

#: Values the pickle never offers to ``reducer_override`` (built-in containers, scalars), and
#: definitions, which have reducers of their own: no need to track them.
_NOT_TRACKED = (
    *(type(None), bool, int, float, complex, str, bytes, dict, list, tuple, set, frozenset),
    *(types.FunctionType, types.ModuleType, types.BuiltinFunctionType),
)


@attrs.frozen
class GlobalPlaces:
    """The globals :func:`progressive` applies to: their places by the value's identity, and
    the values' types (a pickler looks for a value's identity only for objects of these types,
    so every other object costs nothing more)."""

    by_id: Mapping[int, list[Place]] = attrs.field(factory=dict)
    types: frozenset[type] = frozenset()


def global_places(namespaces: Sequence[tuple[str, Mapping[str, Any]]]) -> GlobalPlaces:
    """Every global of the user namespaces that is an instance (the objects
    :func:`progressive` applies to), with its places."""
    by_id: dict[int, list[Place]] = {}
    types_: set[type] = set()
    for module, contents in namespaces:
        for name, value in contents.items():
            if isinstance(value, type) or type(value) in _NOT_TRACKED:
                continue
            by_id.setdefault(id(value), []).append((module, name))
            types_.add(type(value))
    return GlobalPlaces(by_id, frozenset(types_))


class _Step:
    """One attribute set as soon as its value has loaded (the pickle loads it as a call)."""

    __slots__ = ("call",)

    def __init__(self, *call: Any) -> None:
        self.call = call

    def __reduce__(self) -> Any:
        return self.call


def _steps(obj: object, state: Any, setter: Any) -> list[_Step] | None:
    """The steps that set ``state`` on ``obj`` one attribute at a time, or None where the state
    is not the plain one (then it loads in one step, as pickle would)."""
    if setter is rawstate.set_raw_state:
        attrs, values = state
        layout = rawstate.slot_layout(type(obj))
        steps = [_Step(_rebuild.set_dict_item, (obj, k, v)) for k, v in (attrs or {}).items()]
        steps += [
            _Step(_rebuild.set_slot, (obj, owner, name, value))
            for (owner, name, _), value in zip(layout, values, strict=True)
            if value is not rawstate.EMPTY
        ]
        return steps
    if setter is not None or getattr(type(obj), "__setstate__", None) is not None:
        return None
    attrs, slot_values = state if isinstance(state, tuple) and len(state) == 2 else (state, None)
    if not isinstance(attrs, (dict, type(None))) or not isinstance(slot_values, (dict, type(None))):
        return None
    steps = [_Step(_rebuild.set_dict_item, (obj, k, v)) for k, v in (attrs or {}).items()]
    steps += [_Step(setattr, (obj, k, v)) for k, v in (slot_values or {}).items()]
    return steps


def progressive(
    obj: object, reduced: tuple[Any, ...], namespaces: Sequence[Any]
) -> tuple[Any, ...]:
    """``reduced`` (``obj``'s reduce value) changed so that ``obj`` is set in ``namespaces``
    (its modules' :class:`~portal.capture.pickler.NamespaceRef` and names) as soon as it is
    made, and its plain state is set one attribute at a time."""
    func, args, *rest = reduced
    state, listitems, dictitems, setter = (*rest, None, None, None, None)[:4]
    made = (_rebuild.made_as_global, (tuple(namespaces), func, args))
    steps = None if state is None else _steps(obj, state, setter)
    if steps is None:
        return (*made, state, listitems, dictitems, setter)
    return (*made, steps, listitems, dictitems, _rebuild.steps_done)
