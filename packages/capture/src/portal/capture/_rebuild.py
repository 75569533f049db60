"""Functions a checkpoint's pickle calls while loading. Their names are part of the stored
format: rename none of them (old checkpoints name them)."""

from __future__ import annotations

import builtins
import importlib
import marshal
import sys
import types
from typing import Any

from portal.capture import caches

__all__ = [
    "after_globals",
    "class_in_namespace",
    "load_code",
    "lru_cache",
    "made_as_global",
    "make_cell",
    "make_function",
    "module_namespace",
    "set_cell",
    "set_dict_item",
    "set_function_state",
    "set_global",
    "set_slot",
    "set_wrapper_state",
    "std_stream",
    "steps_done",
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
    """The namespace of a user module (or ``__main__``) of the resumed process, or of a library
    module a carried frame or generator runs in (imported if the replay of the program's imports
    did not)."""
    module = sys.modules.get(name)
    if module is None:
        module = importlib.import_module(name)
    return module.__dict__


def set_global(namespace: dict[str, Any], name: str, value: Any) -> None:
    """One global of a user module, set as soon as its value has loaded, so code of the user's
    run by the rest of the load finds it (:mod:`portal.capture.namespaces`)."""
    namespace[name] = value


def after_globals(globals_: list[None], value: Any) -> Any:
    """``value``, which the pickle loads once every global is set (``globals_``: their
    :func:`set_global` calls' results)."""
    return value


def class_in_namespace(
    make: Any, args: tuple[Any, ...], namespace: dict[str, Any], name: str
) -> type:
    """A user class pickled by value (``make(*args)``: cloudpickle's skeleton), set at once as
    the module global it was: code run before its module's turn may name it, as an Enum's
    ``__new__`` names its base while the members of a subclass are made."""
    cls = make(*args)
    namespace[name] = cls
    return cls  # type: ignore[no-any-return]


def made_as_global(
    places: tuple[tuple[dict[str, Any], str], ...], func: Any, args: tuple[Any, ...]
) -> Any:
    """A module-level object, set as its globals (``places``: namespace and name) as soon as
    it is made, before its state loads (:mod:`portal.capture.progressive`)."""
    obj = func(*args)
    for namespace, name in places:
        namespace[name] = obj
    return obj


def set_dict_item(obj: Any, name: str, value: Any) -> None:
    """One attribute of a progressively loaded object, into its ``__dict__`` as pickle's BUILD
    does (no ``__setattr__`` of the object's runs)."""
    obj.__dict__[name] = value


def set_slot(obj: Any, owner: type, name: str, value: Any) -> None:
    """One slot of an object carried as raw state, through the slot's own descriptor."""
    owner.__dict__[name].__set__(obj, value)


def steps_done(obj: Any, steps: list[None]) -> None:
    """The state setter of a progressively loaded object: each step set its attribute as it
    loaded, so nothing is left to do."""


def shared_dict_instance(cls: type[Any], name: str) -> Any:
    """An instance of ``cls`` whose ``__dict__`` is the class's dict ``name`` in this process
    (a "Borg" state shared by every instance; see the pickler's ``_reduce_maybe_shared``)."""
    make: Any = cls.__new__
    obj = make(cls)
    obj.__dict__ = getattr(cls, name)
    return obj


def set_shared_dict_state(obj: Any, state: dict[str, Any]) -> None:
    """The carried contents of a shared class dict, into the one the instance shares."""
    if obj.__dict__ is not state:
        obj.__dict__.update(state)


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


def same_object(obj: Any) -> Any:
    """``obj`` itself: a deep graph's deferred build (:mod:`portal.capture.deepgraph`) applies
    its state to the object the pickle made earlier, found through the memo."""
    return obj


class DeepItems:
    """Receives a deep graph's root and then its deferred builds, and keeps only the root (the
    builds have done their work on their objects as they loaded)."""

    __slots__ = ("root", "seen")

    def __init__(self) -> None:
        self.root: Any = None
        self.seen = False

    def append(self, item: Any) -> None:
        if not self.seen:
            self.root, self.seen = item, True

    def extend(self, items: Any) -> None:
        for item in items:
            self.append(item)


def deep_root(items: DeepItems) -> Any:
    """The root of a deep graph's pickle, once every deferred build has loaded."""
    return items.root
