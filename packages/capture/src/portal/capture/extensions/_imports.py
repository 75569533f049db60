"""Run a function right after a module is first imported, at no cost to a program without it.

Some state must be recorded from the moment a library appears: the values of torch's settings
as import left them (the baseline a program's changes are measured against), the start of each
DataLoader epoch. A ``sys.meta_path`` finder answers only for the named modules and wraps their
loader's ``exec_module``; a module that is already loaded gets the call at once.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
import types
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["when_imported"]

Hook = Callable[[types.ModuleType], None]

_hooks: dict[str, list[Hook]] = {}
_lock = threading.Lock()


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: asks the other finders, then wraps the loader of a watched module."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _hooks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec

        def exec_and_hook(module: types.ModuleType) -> None:
            # The module keeps its real loader (importlib.resources, reload and pkgutil ask it).
            module.__loader__ = loader
            if module.__spec__ is not None:
                module.__spec__.loader = loader
            exec_module(module)
            _run(fullname, module)

        wrapped: Any = _WrappedLoader(loader, exec_and_hook)
        spec.loader = wrapped
        return spec


class _WrappedLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, exec_module: Callable[[types.ModuleType], None]) -> None:
        self._loader = loader
        self._exec = exec_module

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        create: Any = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: types.ModuleType) -> None:
        self._exec(module)

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package...
        return getattr(self._loader, name)


_FINDER = _Finder()


def _run(name: str, module: types.ModuleType) -> None:
    with _lock:
        hooks = _hooks.pop(name, [])
    for hook in hooks:
        hook(module)


def when_imported(name: str, hook: Hook) -> None:
    """Call ``hook(module)`` once ``name`` is imported (now, if it already is)."""
    module = sys.modules.get(name)
    if module is not None:
        hook(module)
        return
    with _lock:
        _hooks.setdefault(name, []).append(hook)
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)
