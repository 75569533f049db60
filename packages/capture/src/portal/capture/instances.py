"""Instances of the program's own classes travel as they are: a bare object and its raw state.

A class may say how to pickle its instances (``__reduce__``): mpmath's numbers rebuild
themselves through ``mp.mpf(x)`` and read ``self._mpf_``, which on its constants is a property
that computes the constant at the current precision. Run at a pause, such a method runs the
program's code at the worst moment (mpmath's: minutes, computing every constant again); run at
a resume, it runs before the program's globals are all back (``from mpmath import mp`` before
``mp`` is). A checkpoint is a snapshot of memory, not a serialization the class designed: so an
instance of a class made entirely by the program's code (every class of its MRO but ``object``
is a Python class of the script or its modules) whose class has a ``__reduce__`` of the
program's is pickled as ``object.__new__(cls)`` and the values of its ``__dict__`` and slots,
read and written through the slot descriptors themselves (a property of a subclass that shadows
a slot is never called). No code of the program runs, at the pause or at the resume.

A class whose raw state holds what a checkpoint cannot carry (a socket its ``__reduce__``
reopens, say) is still pickled its own way: :func:`portal.capture.pickler.dumps` tries again
with ``exact=False`` when the exact pickle fails.
"""

from __future__ import annotations

import types
from collections.abc import Collection
from typing import Any, Final

__all__ = ["bare_instance", "is_exact_candidate", "reduce_exact", "set_exact_state"]

_HEAPTYPE: Final = 1 << 9  # Py_TPFLAGS_HEAPTYPE: made by a class statement or type()
_SKIPPED_SLOTS: Final = frozenset({"__dict__", "__weakref__"})


def is_exact_candidate(cls: type, user_modules: Collection[str]) -> bool:
    """Whether instances of ``cls`` are pickled exactly: every class of its MRO but ``object``
    is a Python class of the program's modules, and one of them defines ``__reduce__`` or
    ``__reduce_ex__`` (without one, pickle's own way is already the raw state)."""
    mro = cls.__mro__
    if mro[-1] is not object:
        return False
    for klass in mro[:-1]:
        if not klass.__flags__ & _HEAPTYPE or klass.__module__ not in user_modules:
            return False
    for klass in mro:
        if "__reduce_ex__" in klass.__dict__ or "__reduce__" in klass.__dict__:
            return klass is not object
    return False


def _mangled(klass: type, name: str) -> str:
    if name.startswith("__") and not name.endswith("__"):
        stripped = klass.__name__.lstrip("_")
        if stripped:
            return f"_{stripped}{name}"
    return name


def _slot_names(klass: type) -> list[str]:
    slots = klass.__dict__.get("__slots__", ())
    if isinstance(slots, str):
        slots = (slots,)
    return [_mangled(klass, name) for name in slots if name not in _SKIPPED_SLOTS]


def reduce_exact(obj: Any) -> tuple[Any, ...]:
    """``obj`` as a bare instance of its class and its raw state."""
    cls = type(obj)
    try:
        attributes = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        attributes = None
    slots = []
    for klass in cls.__mro__:
        for name in _slot_names(klass):
            descriptor = klass.__dict__.get(name)
            if type(descriptor) is not types.MemberDescriptorType:
                continue
            try:
                value = descriptor.__get__(obj, klass)
            except AttributeError:  # an unset slot stays unset
                continue
            slots.append((klass, name, value))
    state = (attributes or None, tuple(slots))
    return (bare_instance, (cls,), state, None, None, set_exact_state)


def bare_instance(cls: type) -> Any:
    """An instance of ``cls`` made without running its ``__new__`` or ``__init__``."""
    return object.__new__(cls)


def set_exact_state(obj: Any, state: tuple[dict[str, Any] | None, tuple[Any, ...]]) -> None:
    attributes, slots = state
    if attributes:
        object.__getattribute__(obj, "__dict__").update(attributes)
    for klass, name, value in slots:
        klass.__dict__[name].__set__(obj, value)
