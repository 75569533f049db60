"""Instances of the program's own classes that define their own ``__reduce__``, carried as what
they are in memory: made with ``object.__new__`` and given their ``__dict__`` and slots back
directly, no code of theirs run, neither while pausing nor while resuming.

A class's ``__reduce__`` is written for *serializing a value*, and that is not always what a
checkpoint of a live program needs:

- it can be lossy: mpmath's constants (``mp.pi``) reduce to a number at the working precision
  of the moment, so after a resume at a higher precision ``mp.pi`` would print fewer digits;
- it can be slow: the same reduce *computes* each constant (a property), so a pause attempt could
  spend minutes computing every cached constant again at the current precision;
- it can need the module's state while loading: ``_make_mpf`` runs ``from mpmath import mp``
  while the pickle is still building ``mp`` (the context holds mpf values in its caches, and each
  mpf class holds the context), which fails.

A checkpoint carries the whole graph by value with its identities (the memo), so the in-memory
state is both faithful and enough: what a custom reduce re-creates from arguments (a registry's
singleton, a cached value) is itself in the graph. Where the raw state cannot travel (a class
whose ``__reduce__`` exists to leave out a connection it holds and make a new one), the class's
own ``__reduce__`` is used, as before; so it is where that ``__reduce__`` refuses (the class says
it cannot be carried). The first instance of each class is tried both ways once per process
(:func:`raw_state_travels`).

Only for plain classes of the program's own modules: every class of the MRO but ``object`` a
Python class (no C base whose layout ``object.__new__`` could not make), the metaclass ``type`` or
``ABCMeta`` (an Enum's members keep their by-name reduce), and the custom ``__reduce__`` or
``__reduce_ex__`` defined by one of the program's classes (a library base's reduce is the
library's business), and the class not registered with ``copyreg`` (a registration wins).
``__getstate__``/``__setstate__`` alone are left to pickle's defaults, which honour them.

The functions the pickle names (:func:`make_raw`, :func:`set_raw_state`) are part of the
checkpoint format: rename neither.
"""

from __future__ import annotations

import abc
import types
import weakref
from collections.abc import Callable, Container
from typing import Any

__all__ = [
    "EMPTY",
    "SlotLayout",
    "make_raw",
    "raw_eligible",
    "raw_reduce",
    "raw_reducer",
    "raw_state",
    "raw_state_travels",
    "set_raw_state",
    "slot_layout",
]

HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement or type()
_REDUCERS = ("__reduce__", "__reduce_ex__")
#: Per class, whether its first instance's raw state pickled (decided once per process).
_TRAVELS: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()

#: A class's slots, in a fixed order: ``(class that declares it, name, its member descriptor)``.
SlotLayout = tuple[tuple[type, str, Any], ...]
_LAYOUTS: weakref.WeakKeyDictionary[type, SlotLayout] = weakref.WeakKeyDictionary()


class _Empty:
    """Stands for a slot that holds no value (pickled by reference: one global per pickle)."""

    __slots__ = ()

    def __reduce__(self) -> str:
        return "EMPTY"

    def __repr__(self) -> str:
        return "EMPTY"


EMPTY = _Empty()


def raw_eligible(cls: type, user_modules: Container[str]) -> bool:
    """Whether instances of ``cls`` travel as raw state (see the module docstring)."""
    if type(cls) not in (type, abc.ABCMeta) or cls.__module__ not in user_modules:
        return False
    own_reduce = False
    for klass in cls.__mro__[:-1]:
        if not klass.__flags__ & HEAPTYPE:
            return False  # a C base (dict, int, an extension's type): its own reduce
        if any(name in klass.__dict__ for name in _REDUCERS):
            if klass.__module__ not in user_modules:
                return False
            own_reduce = True
    return own_reduce and cls.__mro__[-1] is object


def _slot_names(klass: type) -> tuple[str, ...]:
    slots = klass.__dict__.get("__slots__", ())
    names = (slots,) if isinstance(slots, str) else tuple(slots)
    private = "_" + klass.__name__.lstrip("_")
    return tuple(
        private + name if name.startswith("__") and not name.endswith("__") else name
        for name in names
        if name not in ("__dict__", "__weakref__")
    )


def slot_layout(cls: type) -> SlotLayout:
    """``cls``'s slots in MRO order, each with the descriptor that holds it (computed once per
    class; the same class statement gives the same layout in the resumed process)."""
    layout = _LAYOUTS.get(cls)
    if layout is None:
        layout = _LAYOUTS[cls] = tuple(
            (klass, name, descriptor)
            for klass in cls.__mro__[:-1]
            for name in _slot_names(klass)
            if isinstance(descriptor := klass.__dict__.get(name), types.MemberDescriptorType)
        )
    return layout


def raw_state(obj: object) -> tuple[dict[str, Any] | None, tuple[Any, ...]]:
    """``obj``'s ``__dict__`` and its slots' values in :func:`slot_layout` order (:data:`EMPTY`
    for one that holds none), read through each slot's own descriptor: a property of the same
    name in a subclass, which would compute a value, is never called."""
    cls = type(obj)
    values = []
    for _, _, descriptor in slot_layout(cls):
        try:
            values.append(descriptor.__get__(obj, cls))
        except AttributeError:
            values.append(EMPTY)
    attrs = getattr(obj, "__dict__", None)
    return (attrs if isinstance(attrs, dict) and attrs else None), tuple(values)


def raw_reduce(obj: object) -> tuple[Any, ...]:
    """The reduce value of ``obj`` as raw state."""
    return raw_reducer(type(obj))(obj)


def raw_reducer(cls: type) -> Callable[[Any], tuple[Any, ...]]:
    """:func:`raw_reduce` for instances of ``cls``, its layout worked out once (a pickler keeps
    one per class: this runs for every instance)."""
    made = (cls,)  # one tuple for every instance: the pickle memoizes it
    if not slot_layout(cls):

        def reduce_plain(obj: Any) -> tuple[Any, ...]:
            attrs = getattr(obj, "__dict__", None)
            return (make_raw, made, (attrs or None, ()), None, None, set_raw_state)

        return reduce_plain

    getters = tuple(descriptor.__get__ for _, _, descriptor in slot_layout(cls))

    def reduce(obj: Any) -> tuple[Any, ...]:
        values = []
        for get in getters:
            try:
                values.append(get(obj, cls))
            except AttributeError:  # an empty slot
                values.append(EMPTY)
        attrs = getattr(obj, "__dict__", None)
        return (make_raw, made, (attrs or None, tuple(values)), None, None, set_raw_state)

    return reduce


def raw_state_travels(cls: type, obj: object, error_of: Callable[[object], object]) -> bool:
    """Whether ``cls``'s instances go as raw state: decided on its first instance ``obj``
    (``error_of(value)``: the error pickling ``value`` raises, or None), once per process.

    A class whose own reduce refuses (``raise TypeError("cannot pickle Connection")``: it holds
    an OS handle, say, perhaps as a plain int) is taken at its word: it is not carried raw."""
    known = _TRAVELS.get(cls)
    if known is None:
        try:
            obj.__reduce_ex__(5)
        except Exception:
            _TRAVELS[cls] = False
            return False
        # Taken as travelling while its first instance is tried: instances of the class inside
        # that state (a linked list's nodes) are not each tried again, one inside the other.
        _TRAVELS[cls] = True
        try:
            known = error_of(raw_state(obj)) is None
        except BaseException:
            del _TRAVELS[cls]  # not decided (a pause to be taken a few lines later, say)
            raise
        _TRAVELS[cls] = known
    return known


def make_raw(cls: type) -> Any:
    """An instance of ``cls`` made without running any of its code (its state follows)."""
    return object.__new__(cls)


def set_raw_state(obj: Any, state: tuple[dict[str, Any] | None, tuple[Any, ...]]) -> None:
    """Gives ``obj`` its ``__dict__`` and slots back, past any ``__setattr__`` or property."""
    attrs, values = state
    if attrs:
        obj.__dict__.update(attrs)
    if values:
        for (_, _, descriptor), value in zip(slot_layout(type(obj)), values, strict=True):
            if value is not EMPTY:
                descriptor.__set__(obj, value)
