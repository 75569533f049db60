"""Random number generators kept by libraries rather than by the program.

``random.random()`` draws from ``random._inst``, a hidden module-level ``Random``; the module is
pickled by reference (by name), so without this extension a resumed program draws from a freshly
seeded generator. numpy's legacy functions (``np.random.rand``...) draw from
``numpy.random.mtrand._rand`` the same way.

Two parts per generator: a capture extension carries the global state, and a reducer pickles the
global *instance* by reference, so a program that kept a bound method (``from random import
random``, ``draw = np.random.normal``) still shares the one generator after a resume instead of
holding a private copy that would drift apart from the module's. Every other ``Random`` or
``RandomState`` (and numpy ``Generator``) pickles by value with its state, as pickle does.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from portal.core.specs import CaptureExtensionSpec, SerializerSpec

__all__ = ["reduce_numpy_random_state", "reduce_random", "serializer_specs", "specs"]


def _global_attr(module: str, attr: str) -> tuple[Any, tuple[Any, str]]:
    return (getattr, (importlib.import_module(module), attr))


def reduce_random(obj: Any) -> Any:
    """``random._inst`` by reference; any other ``Random`` as pickle would."""
    module = sys.modules.get("random")
    if module is not None and obj is getattr(module, "_inst", None):
        return _global_attr("random", "_inst")
    return NotImplemented


def reduce_numpy_random_state(obj: Any) -> Any:
    """numpy's global legacy ``RandomState`` by reference; any other as pickle would."""
    mtrand = sys.modules.get("numpy.random.mtrand")
    if mtrand is not None and obj is getattr(mtrand, "_rand", None):
        return _global_attr("numpy.random.mtrand", "_rand")
    return NotImplemented


def _capture_random() -> Any:
    import random

    return random.getstate()


def _restore_random(state: Any) -> None:
    import random

    random.setstate(state)


def _capture_numpy() -> Any:
    # numpy is not a dependency: imported by name, only once the program has loaded it.
    return importlib.import_module("numpy.random").get_state(legacy=False)


def _restore_numpy(state: Any) -> None:
    importlib.import_module("numpy.random").set_state(state)


def specs() -> list[CaptureExtensionSpec]:
    return [
        CaptureExtensionSpec(
            name="random_global",
            capture=_capture_random,
            restore=_restore_random,
            modules=("random",),
            description="the state of the random module's global generator",
        ),
        CaptureExtensionSpec(
            name="numpy_random_global",
            capture=_capture_numpy,
            restore=_restore_numpy,
            modules=("numpy.random",),
            description="the state of numpy's legacy global RandomState (np.random.seed/rand...)",
        ),
    ]


def serializer_specs() -> list[SerializerSpec]:
    return [
        SerializerSpec(
            name="capture_rng",
            reducers={
                "random.Random": reduce_random,
                "numpy.random.mtrand.RandomState": reduce_numpy_random_state,
            },
            description="global random generators pickled by reference, not copied",
        )
    ]
