"""A module-level context in a cycle with its own classes (mpmath's shape) pauses at once and
resumes exactly.

mpmath was the corpus's last known gap: its numbers pickle through their own ``__reduce__``, which
for a constant *computes* it at the working precision (a pause attempt took minutes) and turns it
into a plain number (lossy), and which at load runs ``from mpmath import mp`` while ``mp`` is
still being built; ``mp``'s caches hold constants as keys, whose ``__hash__`` reads the context
and library tables. Now the program's own classes with a custom ``__reduce__`` travel as raw
state (:mod:`portal.capture.rawstate`), a module-level instance is set as its global when it is
made and gets its attributes one at a time (:mod:`portal.capture.progressive`), and inert data
(tables) loads with the definitions (:mod:`portal.capture.namespaces`). The script
(``corpus/context_cycle``, our own program in that shape) failed to resume before.
"""

from __future__ import annotations

import pickle
import shutil
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _harness import CORPUS, EXIT_PAUSED, plain_run, run_to_end

from portal.capture import rawstate
from portal.capture.namespaces import fill_order
from portal.capture.pickler import dumps
from portal.capture.progressive import global_places

USER = "portal_test_context_cycle_user"


def test_a_context_in_a_cycle_with_its_classes_resumes_exactly(tmp_path: Path) -> None:
    job = tmp_path / "job"
    shutil.copytree(CORPUS / "context_cycle", job)
    script = job / "main.py"
    plain = plain_run(script)
    assert plain.returncode == 0, plain.stderr.decode()
    assert b"constant Constant pi" in plain.stdout

    codes, out, err = run_to_end(script, tmp_path / "ck.portal", max_runs=5)
    assert codes == [EXIT_PAUSED] * 3 + [0], err.decode()
    assert err == b""
    # The constant is still computed at each later precision; the caches keyed by it answer.
    assert out == plain.stdout


@pytest.fixture
def user() -> Iterator[types.ModuleType]:
    """A module of the program's own (its namespace is a user namespace of the pickler)."""
    module = types.ModuleType(USER)
    exec(
        """
CALLS = []


def _remake(value):
    CALLS.append(value)
    return Value(value)


class Value:
    __slots__ = ("v",)

    def __init__(self, v):
        self.v = v

    def __reduce__(self):
        return _remake, (self.v,)


class Lazy(Value):
    __slots__ = ("func",)

    def __init__(self, func):
        self.func = func

    @property
    def v(self):
        CALLS.append("computed")
        return self.func()


class Handle:
    def __init__(self, name):
        import threading

        self.name, self.lock = name, threading.Lock()

    def __reduce__(self):  # leaves the held lock out: its raw state cannot travel
        return Handle, (self.name,)


class Refuses:
    def __init__(self, fd):
        self.fd = fd  # an OS handle as a plain int: its raw state would pickle

    def __reduce__(self):
        raise TypeError("cannot pickle Refuses: it holds a file descriptor")


class Plain:
    def __init__(self):
        self.a, self.b = 1, [2]


class Registry:
    def __init__(self):
        self.first = "set first"
        self.items = {}
""",
        module.__dict__,
    )
    sys.modules[USER] = module
    yield module
    del sys.modules[USER]


def _round_trip(obj: Any, user: types.ModuleType, **kwargs: Any) -> Any:
    data, buffers, _ = dumps(obj, namespaces={id(user.__dict__): USER}, **kwargs)
    return pickle.loads(data, buffers=buffers)


def test_an_own_class_with_a_custom_reduce_travels_as_raw_state(user: types.ModuleType) -> None:
    lazy = user.Lazy(lambda: 42)
    pair = [user.Value(7), lazy, lazy]
    _round_trip(pair, user)  # each class's first instance is tried its own way once
    user.CALLS.clear()
    value, lazy2, again = _round_trip(pair, user)
    # Since, neither its reduce function nor the property that computes run, pausing or loading.
    assert user.CALLS == []
    assert type(value) is user.Value and value.v == 7
    assert type(lazy2) is user.Lazy and lazy2 is again and lazy2.v == 42  # still computed
    assert user.CALLS == ["computed"]


def test_a_plugin_reducer_that_declines_leaves_an_own_class_to_its_raw_state(
    user: types.ModuleType,
) -> None:
    """A plugin's reducer keyed on a base class returns ``NotImplemented`` for what it does
    not take (mpmath's reducers for a copy of mpmath among the program's files): the object
    goes on to the pickler's own handling (raw state here), not to its class's ``__reduce__``.
    The corpus's mpmath program failed to resume when it went to ``_make_mpf``."""
    declined: list[object] = []

    def decline(obj: object) -> Any:
        declined.append(obj)
        return NotImplemented

    _round_trip([user.Value(1)], user, reducers={object: decline})  # tried its own way once
    user.CALLS.clear()
    (value,) = _round_trip([user.Value(7)], user, reducers={user.Value: decline})
    assert declined and type(value) is user.Value and value.v == 7
    assert user.CALLS == []  # not through _remake: raw state


def test_an_own_class_whose_raw_state_cannot_travel_keeps_its_reduce(
    user: types.ModuleType,
) -> None:
    held = user.Handle("db")
    held.lock.acquire()
    handle = _round_trip(held, user)
    assert type(handle) is user.Handle and handle.name == "db"
    assert handle.lock.acquire(blocking=False)  # made by its own reduce: a new, free lock


def test_an_own_class_whose_reduce_refuses_is_not_carried(user: types.ModuleType) -> None:
    with pytest.raises(TypeError, match="cannot pickle Refuses: it holds a file descriptor"):
        _round_trip(user.Refuses(3), user)


def test_which_classes_travel_as_raw_state(user: types.ModuleType) -> None:
    own = {USER}
    assert rawstate.raw_eligible(user.Value, own) and rawstate.raw_eligible(user.Lazy, own)
    assert not rawstate.raw_eligible(user.Plain, own)  # no reduce of its own: pickle's default
    assert not rawstate.raw_eligible(user.Value, set())  # a library's class
    record = type("Record", (dict,), {"__module__": USER, "__reduce__": dict.__reduce__})
    assert not rawstate.raw_eligible(record, own)  # a C base (dict)


def test_a_global_instance_is_set_when_made_and_filled_one_attribute_at_a_time(
    user: types.ModuleType,
) -> None:
    class Probe:
        """Loads as a call that records what the registry global holds at that moment."""

        def __reduce__(self) -> Any:
            return (_look, (USER,))

    registry = user.Registry()
    registry.items["probe"] = Probe()
    user.registry = registry
    places = global_places([(USER, user.__dict__)])
    data, buffers, _ = dumps(registry, namespaces={id(user.__dict__): USER}, places=places)
    del user.registry
    _SEEN.clear()
    loaded = pickle.loads(data, buffers=buffers)
    assert user.registry is loaded  # set as the global before its state had loaded
    # While its ``items`` loaded, the attribute set before them was there already.
    assert _SEEN == [["first"]]
    assert loaded.first == "set first" and set(loaded.items) == {"probe"}


_SEEN: list[list[str]] = []


def _look(module: str) -> None:
    registry = sys.modules[module].registry
    _SEEN.append(sorted(vars(registry)))


def test_inert_data_loads_with_the_definitions() -> None:
    class Masks:
        def __getitem__(self, n: int) -> int:
            return (1 << n) - 1

    class Box(dict):  # type: ignore[type-arg]
        pass

    namespaces: list[tuple[str, dict[str, object]]] = [
        ("lib", {"state": Box(), "table": [Masks(), [0, 1, 3]], "kinds": (int, str), "N": 3}),
    ]
    order = [name for _, name, _ in fill_order(namespaces)]
    assert order == ["table", "kinds", "N", "state"]
    big = {"rows": list(range(10_000))}  # past the budget: loads with the other values
    order = [name for _, name, _ in fill_order([("lib", {"big": big, "N": 3})])]
    assert order == ["N", "big"]
