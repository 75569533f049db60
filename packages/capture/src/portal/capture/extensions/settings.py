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
from typing import Any, cast

from portal.core.specs import CaptureExtensionSpec

__all__ = [
    "ChangedSetting",
    "NumpyErrorHandling",
    "NumpyPrintOptions",
    "RecursionLimit",
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


class RecursionLimit:
    def __init__(self) -> None:
        self.baseline = sys.getrecursionlimit()

    def capture(self) -> int | None:
        limit = sys.getrecursionlimit()
        return None if limit == self.baseline else limit

    def restore(self, limit: int | None) -> None:
        if limit is not None:
            sys.setrecursionlimit(limit)


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


def _capture_decimal() -> Any:
    import decimal

    return decimal.getcontext().copy()


def _restore_decimal(context: Any) -> None:
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


def specs() -> list[CaptureExtensionSpec]:
    filters = WarningsState()
    limit = RecursionLimit()
    numpy_print = NumpyPrintOptions()
    numpy_errors = NumpyErrorHandling()
    int_digits = ChangedSetting(sys.get_int_max_str_digits, sys.set_int_max_str_digits)
    switch = ChangedSetting(sys.getswitchinterval, sys.setswitchinterval)
    collector = ChangedSetting(_gc_state, _set_gc_state)
    return [
        CaptureExtensionSpec(
            name="warnings_filters",
            capture=filters.capture,
            restore=filters.restore,
            modules=("warnings",),
            description="warnings filters the program set",
        ),
        CaptureExtensionSpec(
            name="recursion_limit",
            capture=limit.capture,
            restore=limit.restore,
            description="sys.setrecursionlimit",
        ),
        CaptureExtensionSpec(
            name="decimal_context",
            capture=_capture_decimal,
            restore=_restore_decimal,
            modules=("decimal",),
            description="the main thread's decimal context (precision, rounding, traps, flags)",
        ),
        CaptureExtensionSpec(
            name="numpy_print_options",
            capture=numpy_print.capture,
            restore=numpy_print.restore,
            modules=("numpy",),
            description="numpy.set_printoptions",
        ),
        CaptureExtensionSpec(
            name="numpy_error_handling",
            capture=numpy_errors.capture,
            restore=numpy_errors.restore,
            modules=("numpy",),
            description="numpy.seterr",
        ),
        CaptureExtensionSpec(
            name="int_max_str_digits",
            capture=int_digits.capture,
            restore=int_digits.restore,
            description="sys.set_int_max_str_digits",
        ),
        CaptureExtensionSpec(
            name="switch_interval",
            capture=switch.capture,
            restore=switch.restore,
            description="sys.setswitchinterval",
        ),
        CaptureExtensionSpec(
            name="gc_settings",
            capture=collector.capture,
            restore=collector.restore,
            description="gc.disable/enable and gc.set_threshold",
        ),
    ]
