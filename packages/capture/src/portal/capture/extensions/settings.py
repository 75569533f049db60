"""Interpreter and library settings a program changes: warnings filters, the decimal context, the
recursion limit, numpy's print options.

Warnings filters and the recursion limit are carried only when the program changed it from the value the process started with (the
baseline), so a resumed process keeps its own defaults (say, ``-W`` options of the new machine)
for what the program left alone. The decimal context and numpy's print options are carried whole
whenever their library is loaded (a ``Context`` does not compare; both cost a few bytes).
"""

from __future__ import annotations

import importlib
import sys
import warnings
from typing import Any, cast

from portal.core.specs import CaptureExtensionSpec

__all__ = ["NumpyPrintOptions", "RecursionLimit", "WarningsState", "specs"]


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


def specs() -> list[CaptureExtensionSpec]:
    filters = WarningsState()
    limit = RecursionLimit()
    numpy_print = NumpyPrintOptions()
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
    ]
