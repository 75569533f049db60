"""mpmath's contexts: the library's singletons by reference, their settings as process state.

mpmath keeps its working precision and display settings in three module-level contexts
(``mpmath.mp``, ``mpmath.iv``, ``mpmath.fp``), which hold the number classes they make, caches
of constants and a great deal of bound machinery; each number refers to its context, and each
context's rebuild needs its numbers (``_make_mpf`` runs ``from mpmath import mp``; the interval
context's ``convert`` needs ``self.mpf``). Carried by value, that cycle could not be loaded again
(``CAPTURE_RESTORE_FAILED``: 'MPIntervalContext' object has no attribute 'mpf'), and a constant
(``mpmath.pi``) carried by value is a number at the precision of the moment.

So a context that *is* mpmath's own singleton, and a constant that is one of its attributes
(``pi``, ``e``, ``euler``...), travels by reference: the resumed process's own, whole. What the
program changed on them travels as process state (``mpmath_contexts``): ``mp`` and ``iv``'s
precision (``prec``, and so ``dps``) and ``pretty``, and ``mp.trap_complex``, restored with the
rest of the process's state, once the program's values are loaded. So the values must not depend
on the precision while they load, and mpmath's own pickling does: ``mp.mpf(exact tuple)`` and
``mp.matrix(rows)`` round to the precision of the moment (53 bits while a resume loads: a run
paused at ``mp.dps = 40`` went on with every number rounded). A number (``mpf``, ``mpc``) of
``mp`` or ``iv`` travels as its exact value, made again with ``make_mpf``/``make_mpc``, which
round nothing, as an instance of that context's own class; a matrix as its entries, in that
context's own matrix class. A context the program made itself (``MPContext()``) and its values
travel by value, as any object, and so does all of it when mpmath is a copy among the program's
own files (its module is then the program's code, carried with its namespaces).

The rebuild function's name is part of the checkpoint format: do not rename it.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import sysconfig
from typing import Any

from portal.core.specs import CaptureExtensionSpec, SerializerSpec

__all__ = [
    "rebuild_mpmath_attribute",
    "rebuild_mpmath_matrix",
    "rebuild_mpmath_number",
    "serializer_specs",
    "specs",
]

_CONTEXTS = ("mp", "iv", "fp")
_SETTINGS = {"mp": ("prec", "pretty", "trap_complex"), "iv": ("prec", "pretty")}


@functools.cache
def _installed() -> bool:
    """Whether the loaded mpmath is an installed library (under the interpreter's prefixes).
    A copy of mpmath among the program's own files is the program's code: its module-level
    context travels with the program's namespaces, by value, as before."""
    path = getattr(sys.modules.get("mpmath"), "__file__", None)
    if not path:
        return False
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    prefixes.update(p for p in sysconfig.get_paths().values() if p)
    real = os.path.realpath(path)
    return any(real.startswith(os.path.realpath(p) + os.sep) for p in prefixes)


def _mpmath() -> Any:
    """mpmath (a resume imports what the program had imported before its state loads)."""
    return importlib.import_module("mpmath")


def rebuild_mpmath_attribute(context: str, name: str | None) -> Any:
    """mpmath's context ``context`` (``mp``), or its attribute ``name`` (``pi``)."""
    mpmath = _mpmath()

    obj = getattr(mpmath, context)
    return obj if name is None else getattr(obj, name)


def _reduce_context(ctx: Any) -> Any:
    if not _installed():
        return NotImplemented
    mpmath = sys.modules["mpmath"]
    for name in _CONTEXTS:
        if getattr(mpmath, name, None) is ctx:
            return (rebuild_mpmath_attribute, (name, None))
    return NotImplemented


def _reduce_constant(constant: Any) -> Any:
    if not _installed():
        return NotImplemented
    mpmath = sys.modules["mpmath"]
    name = getattr(constant, "name", None)
    if isinstance(name, str):
        for context in ("mp", "iv"):
            if getattr(getattr(mpmath, context, None), name, None) is constant:
                return (rebuild_mpmath_attribute, (context, name))
    return NotImplemented


def _context_name(cls: type, attribute: str) -> str | None:
    """Which of mpmath's own contexts made ``cls`` (its ``context``/``ctx`` class attribute);
    None for another context, or a copy of mpmath among the program's files."""
    if not _installed():
        return None
    mpmath = sys.modules["mpmath"]
    owner = getattr(cls, attribute, None)
    return next((n for n in _CONTEXTS if getattr(mpmath, n, None) is owner), None)


def _reduce_mpf(x: Any) -> Any:
    context = _context_name(type(x), "context")
    if context is None or type(x) is not getattr(sys.modules["mpmath"], context).mpf:
        return NotImplemented
    return (rebuild_mpmath_number, (context, "make_mpf", (x._mpf_,)))


def _reduce_mpc(z: Any) -> Any:
    context = _context_name(type(z), "context")
    if context is None or type(z) is not getattr(sys.modules["mpmath"], context).mpc:
        return NotImplemented
    return (rebuild_mpmath_number, (context, "make_mpc", (z._mpc_,)))


def rebuild_mpmath_number(context: str, maker: str, args: tuple[Any, ...]) -> Any:
    """A number of mpmath's context ``context``, made exactly (``make_mpf``/``make_mpc``)."""
    mpmath = _mpmath()

    return getattr(getattr(mpmath, context), maker)(*args)


def _reduce_matrix(m: Any) -> Any:
    context = _context_name(type(m), "ctx")
    if context is None or type(m) is not getattr(sys.modules["mpmath"], context).matrix:
        return NotImplemented
    return (rebuild_mpmath_matrix, (context, dict(vars(m))))


def rebuild_mpmath_matrix(context: str, state: dict[str, Any]) -> Any:
    """A matrix of mpmath's context ``context`` holding the carried entries as they are."""
    mpmath = _mpmath()

    m = object.__new__(getattr(mpmath, context).matrix)
    m.__dict__.update(state)
    return m


def _capture() -> dict[str, dict[str, Any]]:
    if not _installed():
        return {}  # the program's own copy: its contexts travel with its namespaces
    mpmath = sys.modules["mpmath"]
    return {
        context: {attr: getattr(getattr(mpmath, context), attr) for attr in attrs}
        for context, attrs in _SETTINGS.items()
    }


def _restore(settings: dict[str, dict[str, Any]]) -> None:
    mpmath = _mpmath()

    for context, values in settings.items():
        for attr, value in values.items():
            setattr(getattr(mpmath, context), attr, value)


def serializer_specs() -> list[SerializerSpec]:
    return [
        SerializerSpec(
            name="capture_mpmath",
            reducers={
                "mpmath.ctx_mp.MPContext": _reduce_context,
                "mpmath.ctx_iv.MPIntervalContext": _reduce_context,
                "mpmath.ctx_fp.FPContext": _reduce_context,
                "mpmath.ctx_mp_python._constant": _reduce_constant,
                "mpmath.ctx_mp_python._mpf": _reduce_mpf,
                "mpmath.ctx_mp_python._mpc": _reduce_mpc,
                "mpmath.matrices.matrices._matrix": _reduce_matrix,
            },
            description="mpmath's own contexts and their constants by reference; their "
            "numbers and matrices exactly, whatever the precision while they load",
        )
    ]


def specs() -> list[CaptureExtensionSpec]:
    return [
        CaptureExtensionSpec(
            name="mpmath_contexts",
            capture=_capture,
            restore=_restore,
            modules=("mpmath",),
            description="mpmath's mp and iv precision and pretty flags, mp.trap_complex",
        )
    ]
