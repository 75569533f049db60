"""Suspended generators of the user's code through a checkpoint's pickle: a copy continues
exactly as the original does (values yielded, values sent, ``throw``, ``close``, the value it
returns), for generator functions made at random with loops, ``try``/``finally`` and ``with``
around ``yield``, ``yield from``, closures, sends and list/dict/set locals; identity and every
state are kept, and a copy travels again (a second pause) as the original does."""

from __future__ import annotations

import inspect
import pickle
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest
from _harness import EXIT_PAUSED, plain_run, run_to_end
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from portal.capture.pickler import dumps

MODULE = "portal_test_generators_user"

_HELPERS = """
class Ctx:
    def __init__(self, log, tag):
        self.log, self.tag = log, tag

    def __enter__(self):
        self.log.append(("enter", self.tag))
        return self

    def __exit__(self, *exc):
        self.log.append(("exit", self.tag, exc[0].__name__ if exc[0] else None))
        return False


def sub(k, log):
    got = 0
    for j in range(k):
        sent = yield ("sub", j)
        log.append(("sub got", sent))
        got += j
    return got
"""


def _user_module(source: str) -> types.ModuleType:
    """A module the pickler treats as the user's own (its functions travel by value)."""
    module = types.ModuleType(MODULE)
    sys.modules[MODULE] = module
    exec(compile(_HELPERS + source, f"<{MODULE}>", "exec"), module.__dict__)
    return module


def _roundtrip(obj: object, module: types.ModuleType) -> Any:
    data, buffers, _ = dumps(obj, namespaces={id(module.__dict__): MODULE})
    return pickle.loads(data, buffers=buffers)


# -- random generator functions ----------------------------------------------------------------


def _block(depth: int) -> st.SearchStrategy[str]:
    leaves = st.sampled_from(
        [
            "x = yield total\nif x is not None:\n    total += x\n",
            "total = (total * 3 + 1) % 1000003\n",
            "total += yield from sub(2, log)\n",
            "log.append(('at', total))\n",
            "yield (lambda: total)()\n",
            "if total % 4 == 1:\n    return total\n",
            # Locals that are lists, dicts and sets (unhashable: a rebuilt generator keeps them
            # among its code's constants).
            "seen.append(total)\nindex[total % 5] = len(seen)\nkinds.add(total % 3)\n",
            "yield (total, list(seen), sorted(index.items()), sorted(kinds))\n",
        ]
    )
    if depth == 0:
        return leaves
    inner = _block(depth - 1)
    return st.one_of(
        leaves,
        inner.map(lambda b: f"for i{depth} in range(3):\n" + textwrap.indent(b, "    ")),
        inner.map(
            lambda b: (
                "try:\n"
                + textwrap.indent(b, "    ")
                + "finally:\n    log.append(('finally', total))\n"
            )
        ),
        inner.map(lambda b: f"with Ctx(log, {depth}):\n" + textwrap.indent(b, "    ")),
        inner.map(
            lambda b: (
                "try:\n"
                + textwrap.indent(b, "    ")
                + "except KeyError as e:\n    log.append(('caught', str(e)))\n    yield 'caught'\n"
            )
        ),
        st.tuples(inner, inner).map(lambda bs: bs[0] + bs[1]),
    )


_GEN = st.lists(_block(3), min_size=1, max_size=4).map(
    lambda blocks: (
        "def gen(n, log, *, bias=0):\n"
        "    total = n + bias\n"
        "    seen, index, kinds = [n], {'n': n}, {n}\n"
        + "".join(textwrap.indent(b, "    ") for b in blocks)
        + "    yield 'last'\n"
        "    return total\n"
    )
)

_ACTION = st.one_of(
    st.just(("next",)),
    st.integers(-5, 5).map(lambda v: ("send", v)),
    st.just(("throw",)),
)


def _drive(gen: Any, actions: list[tuple[Any, ...]]) -> list[object]:
    """What ``gen`` answers to each action, until it finishes."""
    out: list[object] = []
    for action in actions:
        try:
            if action[0] == "next":
                out.append(("yield", next(gen)))
            elif action[0] == "send":
                out.append(("yield", gen.send(action[1])))
            else:
                out.append(("yield", gen.throw(KeyError("thrown"))))
        except StopIteration as stop:
            out.append(("return", stop.value))
            break
        except (KeyError, TypeError) as exc:  # TypeError: a value sent to a fresh generator
            out.append(("raised", repr(exc)))
            break
    out.append(("state", inspect.getgeneratorstate(gen)))
    return out


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    source=_GEN,
    before=st.lists(_ACTION, max_size=8),
    between=st.lists(_ACTION, max_size=6),
    after=st.lists(_ACTION, max_size=12),
    close=st.booleans(),
)
def test_a_copy_continues_as_the_original(
    source: str,
    before: list[tuple[Any, ...]],
    between: list[tuple[Any, ...]],
    after: list[tuple[Any, ...]],
    close: bool,
) -> None:
    module = _user_module(source)
    log: list[object] = []
    gen = module.gen(2, log, bias=1)
    started = _drive(gen, before)
    copy, copy_log = _roundtrip((gen, log), module)
    assert inspect.getgeneratorstate(copy) == inspect.getgeneratorstate(gen), started
    if between:  # a second pause: the copy, rebuilt and moved on, travels again
        assert _drive(copy, between) == _drive(gen, between)
        copy, copy_log = _roundtrip((copy, copy_log), module)
        assert inspect.getgeneratorstate(copy) == inspect.getgeneratorstate(gen)
    if close:
        gen.close()
        copy.close()
        assert copy_log == log
        return
    assert _drive(copy, after) == _drive(gen, after)
    assert copy_log == log


def test_states_identity_and_yield_from() -> None:
    module = _user_module(
        "def outer(log):\n    r = yield from sub(3, log)\n    yield ('outer', r)\n"
    )
    log: list[object] = []
    running = module.outer(log)
    next(running)
    running.send("a")
    created = module.sub(2, log)
    finished = module.sub(1, log)
    list(finished)
    back = _roundtrip({"a": running, "b": running, "c": created, "d": finished}, module)
    assert back["a"] is back["b"]
    assert inspect.getgeneratorstate(back["a"]) == inspect.GEN_SUSPENDED
    assert inspect.getgeneratorstate(back["c"]) == inspect.GEN_CREATED
    assert inspect.getgeneratorstate(back["d"]) == inspect.GEN_CLOSED
    assert back["a"].gi_yieldfrom is not None
    assert back["a"].__qualname__ == "outer"
    assert list(back["a"]) == list(running)
    assert list(back["c"]) == list(created)
    assert list(back["d"]) == []


def test_a_rebuilt_generator_travels_again_before_and_after_it_moves() -> None:
    module = _user_module("def count(n):\n    for i in range(n):\n        yield i\n")
    gen = module.count(6)
    next(gen)
    once = _roundtrip(gen, module)
    twice = _roundtrip(once, module)  # still at the prologue's yield
    assert list(twice) == [1, 2, 3, 4, 5]
    next(once)
    again = _roundtrip(once, module)  # moved on inside the rebuilt code
    assert list(again) == [2, 3, 4, 5]


def test_a_library_generator_travels_in_its_module_and_is_named() -> None:
    """A library's generator partway (a framework's loader) is carried like the user's, in the
    library's own namespace, and the pickle names its code for the resume's check."""
    import calendar

    module = _user_module("")
    walker = calendar.Calendar().itermonthdates(2024, 1)
    for _ in range(3):
        next(walker)
    carried: list[tuple[types.CodeType, str]] = []
    data, buffers, _ = dumps(walker, namespaces={id(module.__dict__): MODULE}, library_code=carried)
    copy = pickle.loads(data, buffers=buffers)
    assert copy.gi_frame.f_globals is calendar.__dict__
    assert list(copy) == list(walker)
    # itermonthdates delegates (yield from) to itermonthdays3: both travel, both are named.
    assert sorted((code.co_qualname, name) for code, name in carried) == [
        ("Calendar.itermonthdates", "calendar"),
        ("Calendar.itermonthdays3", "calendar"),
    ]


def test_a_generator_of_no_module_is_refused_by_name() -> None:
    module = _user_module("")
    namespace: dict[str, Any] = {}
    exec("def numbers():\n    yield from range(10)\n", namespace)
    walker = namespace["numbers"]()
    next(walker)
    with pytest.raises(TypeError, match=r"numbers of \? runs with globals that are no module's"):
        _roundtrip(walker, module)


@pytest.mark.parametrize("how", ["throw", "close", "send"])
def test_throw_and_close_meet_the_handlers_around_the_yield(how: str) -> None:
    module = _user_module(
        "def guarded(log):\n"
        "    with Ctx(log, 'w'):\n"
        "        try:\n"
        "            x = yield 1\n"
        "            log.append(('sent', x))\n"
        "        except KeyError:\n"
        "            log.append('caught')\n"
        "            yield 'after catch'\n"
        "        finally:\n"
        "            log.append('finally')\n"
        "    yield 'end'\n"
    )
    results = []
    for copy in (False, True):
        log: list[object] = []
        gen = module.guarded(log)
        next(gen)
        if copy:
            gen, log = _roundtrip((gen, log), module)
        if how == "throw":
            got: object = gen.throw(KeyError("k"))
        elif how == "close":
            got = gen.close()
        else:
            got = gen.send("v")
        results.append((got, list(log), inspect.getgeneratorstate(gen)))
    assert results[0] == results[1]
    assert results[1][1][-1] != ("enter", "w") or how == "send"


def test_a_generator_expression_partway_travels() -> None:
    module = _user_module("def squares(data):\n    return (x * x for x in data if x != 2)\n")
    gen = module.squares([1, 2, 3, 4, 5])
    fresh = _roundtrip(gen, module)
    assert next(gen) == 1
    moved = _roundtrip(gen, module)
    assert list(fresh) == [1, 9, 16, 25]
    assert list(moved) == list(gen) == [9, 16, 25]


@pytest.mark.parametrize("handler", ["except", "finally"])
def test_a_throw_inside_yield_from_unwinds_through_the_delegating_generator(handler: str) -> None:
    """3.11 finds the ``SEND`` before the ``YIELD_VALUE`` to leave a ``yield from`` loop: the
    rebuilt generator must be suspended at the original instruction, not a copy."""
    guard = (
        "except KeyError as e:\n        log.append(('caught', str(e)))\n        yield 'caught'\n"
        if handler == "except"
        else "finally:\n        log.append('finally')\n"
    )
    module = _user_module(
        "def outer(log):\n"
        "    try:\n"
        "        total = yield from sub(2, log)\n"
        f"    {guard}"
        "    yield 'end'\n"
    )
    results = []
    for copy in (False, True):
        log: list[object] = []
        gen = module.outer(log)
        next(gen)
        if copy:
            gen, log = _roundtrip((gen, log), module)
        results.append((_drive(gen, [("throw",), ("next",)]), list(log)))
    assert results[0] == results[1]


def test_a_rebuilt_generator_holding_unhashable_locals_travels_again() -> None:
    """pyflakes' ``iterSourceCode(paths)`` shape: a rebuilt generator's code holds its saved
    locals among its constants, so a code object keyed lookup hashing them failed with
    ``TypeError: unhashable type: 'list'`` at the second pause."""
    module = _user_module(
        "def walk(paths):\n"
        "    seen, index, kinds = [], {}, set()\n"
        "    for path in paths:\n"
        "        seen.append(path)\n"
        "        index[path] = len(seen)\n"
        "        kinds.add(path[-2:])\n"
        "        yield path, list(seen), dict(index), sorted(kinds)\n"
    )
    paths = ["a.py", "b.py", "c.txt", "d.py", "e.md"]
    gen = module.walk(paths)
    next(gen)
    once = _roundtrip(gen, module)
    assert next(once) == next(gen)
    twice = _roundtrip(once, module)  # rebuilt, moved on, carried again
    assert list(twice) == list(gen)


_PAUSED_TWICE_IN_A_GENERATOR = """
import os
import signal

from portal.runtime import rt


def source_files(paths):
    seen, index, kinds = [], {}, set()
    for path in paths:
        seen.append(path)
        index[path] = len(seen)
        kinds.add(path.rsplit(".", 1)[-1])
        yield path, list(seen), dict(index), sorted(kinds)


def check(paths):
    total = 0
    for path, seen, index, kinds in source_files(paths):
        if rt.active and path in ("b.py", "d.txt"):
            os.kill(os.getpid(), signal.SIGTERM)
        total += len(seen)
        print(path, seen, index, kinds, total, flush=True)
    return total


print("total", check(["a.py", "b.py", "c.py", "d.txt", "e.py"]))
"""


def test_a_script_pauses_twice_while_its_generator_holds_lists(tmp_path: Path) -> None:
    """Paused (SIGTERM) with the generator suspended, resumed, paused again with the rebuilt
    generator suspended, resumed: the output is the plain run's."""
    script = tmp_path / "walk.py"
    script.write_text(_PAUSED_TWICE_IN_A_GENERATOR)
    ckpt = tmp_path / "ck.portal"
    codes, out, err = run_to_end(script, ckpt, cwd=tmp_path, max_runs=4, timeout=60)
    assert codes == [EXIT_PAUSED, EXIT_PAUSED, 0], err.decode()
    assert out == plain_run(script).stdout
