"""Interpreter and library settings a program changes: warnings filters, the decimal context, the
recursion limit, the integer-string digit limit, the thread switch interval, the garbage
collector's switch and thresholds, numpy's print options and floating-point error handling.

The interpreter's settings are carried only when the program changed them from the value the
process started with (the baseline), so a resumed process keeps its own defaults (say, ``-W``
options of the new machine) for what the program left alone. The decimal context and numpy's
settings are carried whole whenever their library is loaded (a ``Context`` does not compare;
numpy is often imported after the baseline is read; each costs a few bytes).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import sys
import warnings
from collections.abc import Callable
from typing import Any, Protocol, cast

from portal.capture.restoring import after_restore
from portal.core.specs import CaptureExtensionSpec

__all__ = [
    "ChangedSetting",
    "DecimalContext",
    "NumpyErrorHandling",
    "NumpyPrintOptions",
    "WarningRegistries",
    "WarningsState",
    "specs",
]


class WarningsState:
    """``warnings.filters``, when the program changed them (what was shown already:
    :class:`WarningRegistries`)."""

    def __init__(self) -> None:
        self.baseline = list(warnings.filters)

    def capture(self) -> list[Any] | None:
        filters = list(warnings.filters)
        return None if filters == self.baseline else filters

    def restore(self, filters: list[Any] | None) -> None:
        if filters is None:
            return
        # typeshed calls it a Sequence; it is the module's one list, which catch_warnings and
        # simplefilter also replace in place.
        cast("list[Any]", warnings.filters)[:] = filters
        # The C accelerator caches the filter list's version; tell it the list changed.
        mutated = getattr(warnings, "_filters_mutated", None)
        if mutated is not None:
            mutated()


def _filter_action(category: type[Warning], text: str, module: str, lineno: int) -> str:
    """The action ``warnings.filters`` give a warning: the first filter that matches it, as
    the interpreter matches them, else the default action."""
    for action, message, cat, mod, line in warnings.filters:
        if (
            (message is None or message.match(text))
            and issubclass(category, cat)
            and (mod is None or mod.match(module))
            and (line == 0 or line == lineno)
        ):
            return str(action)
    return str(getattr(warnings, "defaultaction", "default"))  # (untyped in typeshed)


def _filters_version() -> int | None:
    """The interpreter's count of changes to the filters, which a registry of shown warnings
    must carry to count (CPython keeps it in C, and writes it into a registry it checks). Read
    by checking, against an empty registry, a warning the filters ignore or turn into an
    error (caught here): nothing is shown. None where the filters show every kind tried
    (``-W always``)."""
    for category in (ImportWarning, ResourceWarning, PendingDeprecationWarning):
        if _filter_action(category, "", "portal", 0) not in ("ignore", "error"):
            continue
        probe: dict[Any, Any] = {}
        with contextlib.suppress(category):  # an "error" filter raises it
            warnings.warn_explicit("", category, "<portal>", 0, module="portal", registry=probe)
        version = probe.get("version")
        return version if isinstance(version, int) else None
    return None


class WarningRegistries:
    """Which warnings were shown already, so a resumed run shows none of them again.

    A ``default`` warning (the usual action) is shown once per place: each module's
    ``__warningregistry__`` (and ``warnings.onceregistry`` for ``once``) remembers it. A new
    process starts with them empty, so a library's warning given at every epoch (a DataLoader's
    ``pin_memory`` warning) would be shown again after a resume, where the uninterrupted run
    stayed quiet. The entries still in force (written under the current filters; a change of
    the filters voids them all, as in any run) are carried by module name, and written back
    once the checkpoint has loaded, under the new process's filters version."""

    def capture(self) -> dict[str, Any] | None:
        version = _filters_version()
        if version is None:
            return None
        shown: dict[str, list[Any]] = {}
        for name, module in list(sys.modules.items()):
            registry = getattr(module, "__dict__", {}).get("__warningregistry__")
            keys = _in_force(registry, version)
            if keys:
                shown[name] = keys
        once = _in_force(getattr(warnings, "onceregistry", None), version)
        return {"modules": shown, "once": once} if shown or once else None

    def restore(self, carried: dict[str, Any] | None) -> None:
        if carried:
            after_restore(lambda: _write_registries(carried))


def _in_force(registry: Any, version: int) -> list[Any]:
    if not isinstance(registry, dict) or registry.get("version") != version:
        return []
    return [key for key, shown in registry.items() if key != "version" and shown]


def _write_registries(carried: dict[str, Any]) -> None:
    version = _filters_version()
    if version is None:
        return
    targets = [(warnings.__dict__.get("onceregistry"), carried.get("once") or [])]
    for name, keys in carried.get("modules", {}).items():
        module = sys.modules.get(name)
        if module is not None:  # a module not loaded again has nothing to warn yet
            targets.append((module.__dict__.setdefault("__warningregistry__", {}), keys))
    for registry, keys in targets:
        if not isinstance(registry, dict) or not keys:
            continue
        if registry.get("version") != version:
            registry.clear()
            registry["version"] = version
        registry.update(dict.fromkeys(keys, True))


class ChangedSetting:
    """An interpreter setting carried only when the program changed it from the baseline (so a
    resumed process keeps the new machine's default for what the program left alone)."""

    def __init__(self, read: Callable[[], Any], write: Callable[[Any], None]) -> None:
        self.read = read
        self.write = write
        self.baseline = read()

    def capture(self) -> Any:
        value = self.read()
        return None if value == self.baseline else value

    def restore(self, value: Any) -> None:
        if value is not None:
            self.write(value)


def _gc_state() -> tuple[bool, tuple[int, ...]]:
    return gc.isenabled(), gc.get_threshold()


def _set_gc_state(state: tuple[bool, tuple[int, ...]]) -> None:
    enabled, threshold = state
    gc.set_threshold(*threshold)
    if enabled:
        gc.enable()
    else:
        gc.disable()


class DecimalContext:
    """The main thread's decimal context, carried whole (a ``Context`` does not compare)."""

    def capture(self) -> Any:
        import decimal

        return decimal.getcontext().copy()

    def restore(self, context: Any) -> None:
        import decimal

        decimal.setcontext(context)


class NumpyPrintOptions:
    """``numpy.get_printoptions()``, carried whole whenever numpy is loaded: numpy is often
    imported after the baseline is read, and the options are a small dict."""

    def capture(self) -> dict[str, Any]:
        np = importlib.import_module("numpy")  # not a dependency: only here when loaded
        return dict(np.get_printoptions())

    def restore(self, options: dict[str, Any]) -> None:
        np = importlib.import_module("numpy")
        options = dict(options)
        if options.get("legacy") == sys.maxsize:  # numpy 2 reports "no legacy mode" so
            options["legacy"] = False
        np.set_printoptions(**options)


class NumpyErrorHandling:
    """``numpy.seterr``: how floating-point errors are handled (ignore, warn, raise...)."""

    def capture(self) -> dict[str, str]:
        np = importlib.import_module("numpy")
        return dict(np.geterr())

    def restore(self, modes: dict[str, str]) -> None:
        np = importlib.import_module("numpy")
        np.seterr(**modes)


class _Carried(Protocol):
    def capture(self) -> Any: ...

    def restore(self, value: Any) -> None: ...


def _carried() -> list[tuple[str, _Carried, str, tuple[str, ...]]]:
    """Each setting's name, what carries it, what it is, and the modules it needs loaded; in
    the order they are restored. Built per call: each carrier reads its baseline when made."""
    return [
        ("warnings_filters", WarningsState(), "warnings filters the program set", ("warnings",)),
        (
            "warnings_shown",
            WarningRegistries(),
            "the warnings shown already (each module's __warningregistry__)",
            ("warnings",),
        ),
        (
            "recursion_limit",
            ChangedSetting(sys.getrecursionlimit, sys.setrecursionlimit),
            "sys.setrecursionlimit",
            (),
        ),
        (
            "decimal_context",
            DecimalContext(),
            "the main thread's decimal context (precision, rounding, traps, flags)",
            ("decimal",),
        ),
        ("numpy_print_options", NumpyPrintOptions(), "numpy.set_printoptions", ("numpy",)),
        ("numpy_error_handling", NumpyErrorHandling(), "numpy.seterr", ("numpy",)),
        (
            "int_max_str_digits",
            ChangedSetting(sys.get_int_max_str_digits, sys.set_int_max_str_digits),
            "sys.set_int_max_str_digits",
            (),
        ),
        (
            "switch_interval",
            ChangedSetting(sys.getswitchinterval, sys.setswitchinterval),
            "sys.setswitchinterval",
            (),
        ),
        (
            "gc_settings",
            ChangedSetting(_gc_state, _set_gc_state),
            "gc.disable/enable and gc.set_threshold",
            (),
        ),
    ]


def specs() -> list[CaptureExtensionSpec]:
    return [
        CaptureExtensionSpec(
            name=name,
            capture=carried.capture,
            restore=carried.restore,
            modules=modules,
            description=what,
        )
        for name, carried, what, modules in _carried()
    ]
