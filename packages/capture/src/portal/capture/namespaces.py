"""The order a checkpoint loads the user namespaces in, so that the user's code run while it
loads finds its module's globals.

Unpickling runs code of the user's modules: a dict subclass is filled through its own
``__setitem__`` (torchbearer's ``State``), an object's ``__setstate__`` or ``__reduce__`` callable
runs, an Enum's members are made through its ``__new__`` (ignite's ``EventEnum``), a class's
``__init_subclass__`` runs. That code reads its module's globals, as it did when the program
made the object. A checkpoint that loaded every value first and filled the namespaces only then
left them empty at that moment (NameError). So the pickle begins with the globals, each set into
its module's real namespace as soon as it has loaded, in the order the program's imports made
them:

1. the definitions (classes, functions, modules, constants) of every namespace, then the other
   values (instances, containers): an object's code finds every definition it names, wherever
   the object sits and whatever order its namespace has (a global first assigned ``None`` and
   later an instance comes before the class and functions the instance's code needs);
2. the modules each after those whose values it holds (``from b import X``, an instance of a
   class of b), as their imports completed; otherwise in the order ``sys.modules`` lists them
   (the order their imports ended), ``__main__`` last;
3. within a module, in its namespace's order (the order its lines defined them).

The frames and the capture extensions' state come after all of them. Modules that import each
other have no such order; for them the pickler also sets a user class in its module the moment
the class is made, before its module's turn (ignite's ``Events``, reached from another module,
makes its members through its base's ``__new__``, which names another class of its module).
"""

from __future__ import annotations

import functools
import types
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, cast

from portal.capture import _rebuild, rawstate
from portal.capture.pickler import NamespaceRef

__all__ = ["GlobalsFirst", "fill_order"]

#: Definitions and constants, set in the first pass: what the code run while other values load
#: looks up (classes, functions, modules, a flag or a size).
_DEFINITIONS: tuple[type, ...] = (
    type,
    types.FunctionType,
    types.ModuleType,
    types.BuiltinFunctionType,
    functools._lru_cache_wrapper,
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
)


#: Containers of definitions and constants are constants too, up to this many items in all (a
#: bigger one loads in the second pass, as any value does: checking it would cost more).
_DATA_BUDGET = 4096


_INERT: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()


def _inert(t: type) -> bool:
    """Whether an instance of ``t`` loads without running code: a Python class (no C base but
    ``object``) with pickle's default making and state (no ``__new__``, ``__reduce__``,
    ``__getstate__`` or ``__setstate__`` of its own)."""
    known = _INERT.get(t)
    if known is None:
        cls: Any = t
        known = _INERT[t] = (
            type(t) is type
            and cls.__new__ is object.__new__
            and cls.__reduce_ex__ is object.__reduce_ex__
            and cls.__reduce__ is object.__reduce__
            and getattr(t, "__getstate__", None) is getattr(object, "__getstate__", None)
            and getattr(t, "__setstate__", None) is None
            and all(k.__flags__ & rawstate.HEAPTYPE for k in t.__mro__[:-1])
        )
    return known


def _is_definition(value: object) -> bool:
    """A definition or constant, or *inert data*: tuples, lists, dicts, sets and frozensets of
    them, and instances of plain classes whose state is (``_exp_types = (int, MPZ)``, a lookup
    table ``h_mask = [LazyMasks(), [0, 1, 3, ...]]``). Inert data runs no code and needs nothing
    but definitions while it loads, so loading it first costs nothing, and library code run while
    the rest loads (a hash that computes, say) finds its tables."""
    if isinstance(value, _DEFINITIONS):
        return True
    budget = _DATA_BUDGET
    pending: list[object] = [value]
    while pending:
        item = pending.pop()
        if type(item) in (tuple, list, set, frozenset):
            items = cast("tuple[object, ...] | list[object] | set[object]", item)
            budget -= len(items)
            if budget < 0:
                return False  # before copying a big container's items: never more work
            pending.extend(items)
        elif type(item) is dict:
            budget -= 2 * len(item)
            if budget < 0:
                return False
            pending.extend(item.keys())
            pending.extend(item.values())
        elif _inert(type(item)):
            attrs, values = rawstate.raw_state(item)
            budget -= len(attrs or ()) + len(values)
            pending.extend((attrs or {}).values())
            pending.extend(v for v in values if v is not rawstate.EMPTY)
        elif not isinstance(item, _DEFINITIONS):
            return False
        if budget < 0:
            return False
    return True


def _home_module(value: object) -> str | None:
    """The module a global's value comes from: its own for a class, function or module; its
    class's for any other object."""
    if isinstance(value, types.ModuleType):
        return value.__name__
    owner = value if isinstance(value, (type, types.FunctionType)) else type(value)
    home = getattr(owner, "__module__", None)
    return home if isinstance(home, str) else None


def _module_order(namespaces: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """Module names, each after the modules whose values it holds (cycles: load order)."""
    index = {name: i for i, (name, _) in enumerate(namespaces)}
    needs: dict[str, list[str]] = {}
    for name, contents in namespaces:
        found = {_home_module(value) for value in contents.values()}
        needs[name] = sorted((m for m in found if m in index and m != name), key=index.__getitem__)
    order: list[str] = []
    seen: set[str] = set()
    roots = [name for name, _ in namespaces if name != "__main__"]
    if "__main__" in index:
        roots.append("__main__")
    # Depth first, without recursion (a package's chain of imports may be long): a module is
    # placed once each module it needs is placed or is on the way there (an import cycle).
    for root in roots:
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(needs[root]))]
        while stack:
            name, pending = stack[-1]
            nxt = next((m for m in pending if m not in seen and m != "__main__"), None)
            if nxt is None:
                stack.pop()
                order.append(name)
            else:
                seen.add(nxt)
                stack.append((nxt, iter(needs[nxt])))
    return order


def fill_order(
    namespaces: Sequence[tuple[str, Mapping[str, Any]]],
) -> list[tuple[str, str, Any]]:
    """``(module, name, value)`` for every global of ``namespaces`` (module name and contents,
    user modules in load order), in the order the checkpoint sets them (see module docstring)."""
    contents = dict(namespaces)
    order = _module_order(namespaces)
    entries = [
        (module, name, value)
        for module in order
        for name, value in contents[module].items()
        if _is_definition(value)
    ]
    entries += [
        (module, name, value)
        for module in order
        for name, value in contents[module].items()
        if not _is_definition(value)
    ]
    return entries


class _Global:
    """One global in the pickle: loads as ``namespace[name] = value``, at once."""

    __slots__ = ("name", "namespace", "value")

    def __init__(self, namespace: NamespaceRef, name: str, value: object) -> None:
        self.namespace = namespace
        self.name = name
        self.value = value

    def __reduce__(self) -> Any:
        return (_rebuild.set_global, (self.namespace, self.name, self.value))


class GlobalsFirst:
    """Pickles as ``value``, preceded by the globals of the user namespaces, each set into its
    module's namespace as it loads (in :func:`fill_order`). ``value`` refers to the namespaces
    themselves (by :class:`NamespaceRef`), which are full once it loads."""

    __slots__ = ("globals", "value")

    def __init__(self, value: object, namespaces: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        refs = {name: NamespaceRef(name) for name, _ in namespaces}
        self.globals = [
            _Global(refs[module], name, item) for module, name, item in fill_order(namespaces)
        ]
        self.value = value

    def __reduce__(self) -> Any:
        return (_rebuild.after_globals, (self.globals, self.value))
