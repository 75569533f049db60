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

import gc
import importlib
import sys
import warnings
from collections.abc import Callable
from typing import Any, Protocol, cast

from portal.core.specs import CaptureExtensionSpec

__all__ = [
    "ChangedSetting",
    "DecimalContext",
    "NumpyErrorHandling",
    "NumpyPrintOptions",
    "WarningsState",
    "specs",
]


class WarningsState:
    """``warnings.filters``, when the program changed them.

    The registries of warnings already shown (a module's ``__warningregistry__``,
    ``warnings.onceregistry``) are not made to match: the interpreter empties them whenever the
    filters' version differs from its own, which it always does in a new process, so a ``once``
    or ``default`` warning may be shown once more after a resume.
    """

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
