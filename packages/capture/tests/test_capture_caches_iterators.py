"""lru_cache contents and statistics, itertools iterators partway through, weak references:
carried by the checkpoint pickler (unit round-trips) and through a real pause (end to end)."""

from __future__ import annotations

import collections
import contextlib
import copy
import functools
import itertools
import math
import operator
import os
import pickle
import random
import re
import signal
import subprocess
import sys
import types
import warnings
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _harness import EXIT_PAUSED, plain_run, runtime, short_dir

from portal.capture import _rebuild, caches, notes
from portal.capture._plugins import load_reducers
from portal.capture.extensions import iterators
from portal.capture.pickler import dumps, resolve_reducers

USER = "portal_test_user_module"


@pytest.fixture(scope="module")
def user() -> Iterator[types.ModuleType]:
    """A user namespace (as a script's own module is): its functions travel by value."""
    module = types.ModuleType(USER)
    exec(
        """
import functools

def make_cached(maxsize=3, typed=False):
    calls = []

    @functools.lru_cache(maxsize=maxsize, typed=typed)
    def cached(x, y=0, *, z=None):
        calls.append((x, y, z))
        return (x, y, z, len(calls))

    cached.calls = calls
    return cached

@functools.cache
def unbounded(*args, **kwargs):
    return (args, sorted(kwargs.items()))

def add(a, b):
    return a + b

def make_held_lock(name):
    import threading

    lock = threading.Lock()
    lock.acquire()  # held: an unlocked one would travel (re-created)
    return lock

def below(limit):
    return lambda v: v < limit

class Thing:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"Thing({self.name!r})"

    def __eq__(self, other):
        return type(other) is type(self) and other.name == self.name

    def __hash__(self):
        return hash(self.name)
""",
        module.__dict__,
    )
    sys.modules[USER] = module
    yield module
    del sys.modules[USER]


def round_trip(obj: Any, user: types.ModuleType) -> Any:
    """``obj`` through the checkpoint pickler and back, failing on any DeprecationWarning."""
    reducers = resolve_reducers(load_reducers())
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        data, buffers, _ = dumps(obj, namespaces={id(user.__dict__): USER}, reducers=reducers)
        return pickle.loads(data, buffers=buffers)


def lru_entries(wrapper: Any) -> list[tuple[Any, ...]]:
    """(args, kwargs, result) of each entry, least recently used first."""
    typed = wrapper.cache_parameters()["typed"]
    return caches._entries_of(wrapper, typed)


# -- lru_cache --------------------------------------------------------------------------------


@pytest.mark.parametrize(("maxsize", "typed"), [(3, False), (4, True), (None, False), (0, False)])
def test_an_lru_cache_keeps_contents_order_and_statistics(
    user: types.ModuleType, maxsize: int | None, typed: bool
) -> None:
    f = user.make_cached(maxsize=maxsize, typed=typed)
    for args, kwargs in [
        ((1,), {}),
        ((2,), {"y": 1}),
        ((1,), {}),
        (("a",), {"z": 5}),
        ((3.0,), {}),
    ]:
        f(*args, **kwargs)
    f(2, y=1)  # a hit: now the most recent
    before = (f.cache_info(), lru_entries(f), list(f.calls))

    g, again = round_trip([f, f], user)

    assert g is again and g is not f
    assert (g.cache_info(), lru_entries(g), g.calls) == before  # the function was not called
    assert g.cache_parameters() == {"maxsize": maxsize, "typed": typed}
    # Going on the same way from both gives the same evictions, hits and calls.
    for args in [(4,), (1,), (5,), (2,), (1,), (3.0,), (3,)]:
        assert g(*args)[:3] == f(*args)[:3]
    assert (g.cache_info(), g.calls) == (f.cache_info(), f.calls)
    assert [e[:2] for e in lru_entries(g)] == [e[:2] for e in lru_entries(f)]


def test_functools_cache_and_keyword_keys_come_back(user: types.ModuleType) -> None:
    user.unbounded.cache_clear()
    user.unbounded(1, 2)
    user.unbounded("s")
    user.unbounded(k=1, j=(2, 3))
    user.unbounded(1, 2)
    back = round_trip(user.unbounded, user)
    assert back.cache_info() == user.unbounded.cache_info()
    assert lru_entries(back) == lru_entries(user.unbounded)


def test_a_library_cache_stays_by_reference(user: types.ModuleType) -> None:
    import fnmatch

    cached = vars(fnmatch)["_compile_pattern"]  # an lru_cache of the standard library
    assert round_trip(cached, user) is cached


def test_a_cache_over_a_builtin_travels_with_its_contents(user: types.ModuleType) -> None:
    """mpmath's ``ifac = lru_cache(maxsize=1024)(math.factorial)``: named like math.factorial
    (update_wrapper copied its names) but not it, so it travels by value."""
    ifac = functools.lru_cache(maxsize=3)(math.factorial)
    for n in (5, 7, 5, 9, 11):
        ifac(n)
    before = (ifac.cache_info(), lru_entries(ifac))
    back, again = round_trip([ifac, ifac], user)
    assert back is again and back is not ifac and back.__wrapped__ is math.factorial
    assert (back.cache_info(), lru_entries(back)) == before
    assert back.cache_parameters() == {"maxsize": 3, "typed": False}
    assert back(12) == ifac(12) and back.cache_info() == ifac.cache_info()
    assert [e[:2] for e in lru_entries(back)] == [e[:2] for e in lru_entries(ifac)]


def test_a_cache_over_a_bound_builtin_method_shares_its_object(user: types.ModuleType) -> None:
    """pycodestyle's ``noqa = lru_cache(512)(re.compile(...).search)``, and a bound method of a
    carried object, which stays the one object the program holds."""
    squeeze = functools.lru_cache(maxsize=8)(re.compile(r"\s+").sub)
    squeeze(" ", "a  b")
    squeeze("-", "c   d")
    table = {"a": 1}
    lookup = functools.lru_cache(maxsize=None)(table.get)
    lookup("a")
    lookup("b", 0)
    s2, l2, t2 = round_trip((squeeze, lookup, table), user)
    assert (s2.cache_info(), lru_entries(s2)) == (squeeze.cache_info(), lru_entries(squeeze))
    assert s2("_", "e f") == "e_f" and s2.__qualname__ == "Pattern.sub"
    assert l2.__wrapped__.__self__ is t2 and t2 == table
    assert (l2.cache_info(), lru_entries(l2)) == (lookup.cache_info(), lru_entries(lookup))
    t2["c"] = 3
    assert l2("c") == 3 and l2("a") == 1  # the carried dict; "a" was a hit


def test_a_cache_over_a_library_function_travels_by_value(user: types.ModuleType) -> None:
    join = functools.lru_cache(maxsize=4)(os.path.join)
    join("a", "b")
    back = round_trip(join, user)
    assert back is not join and back.__wrapped__ is os.path.join
    assert (back.cache_info(), lru_entries(back)) == (join.cache_info(), lru_entries(join))


def test_a_cache_whose_results_cannot_travel_still_works_empty(user: types.ModuleType) -> None:
    """``re.Match`` results (pycodestyle's noqa) cannot be pickled: the cache comes back empty,
    with a note, and gives the same answers."""
    noqa = functools.lru_cache(512)(re.compile(r"# no(?:qa|pep8)\b", re.I).search)
    noqa("x = 1  # noqa")
    noqa("y = 2")
    back = round_trip(noqa, user)
    assert back.cache_info().currsize == 0 and back.cache_parameters()["maxsize"] == 512
    assert back("z  # NOQA").group() == "# NOQA" and back("w") is None
    assert any("re.Match" in n and "comes back empty" in n for n in notes.restore_notes())


def test_a_cache_that_cannot_be_refilled_comes_back_empty_with_a_note(
    user: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = user.make_cached()
    f(1)
    f(1)
    monkeypatch.setattr(caches, "_layout_checked", lambda: "a layout of another interpreter")
    g = round_trip(f, user)
    assert g.cache_info().currsize == 0 and g.calls == f.calls
    assert any(
        "comes back empty: a layout of another interpreter" in n for n in notes.restore_notes()
    )


def test_a_cache_that_cannot_be_read_comes_back_empty_with_a_note(
    user: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = user.make_cached()
    f(7)
    monkeypatch.setattr(caches, "_reading_checked", lambda: "read nothing here")
    g = round_trip(f, user)
    assert g.cache_info().currsize == 0
    assert any("comes back empty: read nothing here" in n for n in notes.restore_notes())


def test_a_cache_of_what_cannot_travel_comes_back_empty(user: types.ModuleType) -> None:
    f = user.make_cached()
    f(1)
    lock_cache = functools.lru_cache(maxsize=2)(user.make_held_lock)
    lock_cache("a")
    f2, locks2 = round_trip((f, lock_cache), user)
    assert f2.cache_info() == f.cache_info()
    assert locks2.cache_info().currsize == 0
    assert any("its contents cannot be carried" in n for n in notes.restore_notes())


def test_checkpoints_made_before_caches_were_carried_still_load(user: types.ModuleType) -> None:
    w = _rebuild.lru_cache(user.add, 8, False)
    _rebuild.set_wrapper_state(w, {"tag": "old"})
    assert w.tag == "old" and w(1, 2) == 3 and w.cache_info().currsize == 1


def test_the_cache_layout_checks_pass_on_this_interpreter() -> None:
    assert caches._reading_checked() is None
    assert caches._layout_checked() is None


# -- itertools --------------------------------------------------------------------------------


def take(it: Iterator[Any], n: int) -> list[Any]:
    out = []
    for item in itertools.islice(it, n):
        if type(item) is tuple and len(item) == 2 and type(item[1]).__name__ == "_grouper":
            item = (item[0], list(item[1]))  # a groupby's group, by its items
        out.append(item)
    return out


def _batched() -> list[tuple[str, Callable[[types.ModuleType], Iterator[Any]]]]:
    if sys.version_info < (3, 12):
        return []
    return [("batched", lambda u: itertools.batched(range(20), 3))]


FACTORIES: list[tuple[str, Callable[[types.ModuleType], Iterator[Any]]]] = [
    ("count", lambda u: itertools.count(5)),
    ("count_step", lambda u: itertools.count(2.5, 0.5)),
    ("count_big", lambda u: itertools.count(sys.maxsize - 3)),
    ("cycle", lambda u: itertools.cycle(iter("abcd"))),
    ("chain", lambda u: itertools.chain([1, 2], (), "xyz", range(3))),
    ("chain_from", lambda u: itertools.chain.from_iterable(iter([[1], [2, 3], [], [4, 5, 6]]))),
    ("islice", lambda u: itertools.islice(itertools.count(), 3, 60, 4)),
    ("islice_open", lambda u: itertools.islice(iter(range(50)), 2, None)),
    ("product", lambda u: itertools.product("ab", range(3), repeat=2)),
    ("product_empty", lambda u: itertools.product()),
    ("permutations", lambda u: itertools.permutations(range(5), 3)),
    ("combinations", lambda u: itertools.combinations("abcdef", 3)),
    ("cwr", lambda u: itertools.combinations_with_replacement("abcd", 3)),
    ("groupby", lambda u: itertools.groupby("aaabccddddeaa")),
    ("groupby_key", lambda u: itertools.groupby(range(30), lambda v: v // 4)),
    ("accumulate", lambda u: itertools.accumulate(range(1, 30))),
    ("accumulate_func", lambda u: itertools.accumulate(range(1, 30), operator.mul, initial=2)),
    ("accumulate_none", lambda u: itertools.accumulate([None, 1, 2], lambda a, b: (a, b))),
    ("zip_longest", lambda u: itertools.zip_longest("ab", range(6), "xyz", fillvalue="-")),
    ("starmap", lambda u: itertools.starmap(u.add, [(i, i) for i in range(12)])),
    ("repeat", lambda u: itertools.repeat("x", 9)),
    ("repeat_forever", lambda u: itertools.repeat(u.Thing("t"))),
    ("compress", lambda u: itertools.compress(range(30), itertools.cycle([1, 0, 1]))),
    ("dropwhile", lambda u: itertools.dropwhile(u.below(4), range(20))),
    ("takewhile", lambda u: itertools.takewhile(u.below(7), range(20))),
    ("filterfalse", lambda u: itertools.filterfalse(lambda v: v % 3, range(30))),
    ("pairwise", lambda u: itertools.pairwise(range(12))),
    *_batched(),
    ("enumerate", lambda u: enumerate(itertools.count(3), 10)),
    ("zip", lambda u: zip(itertools.cycle("ab"), range(30))),
    ("map", lambda u: map(u.add, itertools.count(), itertools.repeat(10))),
    ("filter", lambda u: filter(None, itertools.cycle([0, 1, 2]))),
    ("reversed", lambda u: reversed(list(range(12)))),
]


@pytest.mark.parametrize(("name", "make"), FACTORIES, ids=[n for n, _ in FACTORIES])
@pytest.mark.parametrize("steps", [0, 1, 4, 200])
def test_an_iterator_goes_on_from_where_it_was(
    user: types.ModuleType, name: str, make: Callable[[types.ModuleType], Iterator[Any]], steps: int
) -> None:
    original = make(user)
    take(original, steps)
    copy, again = round_trip((original, original), user)
    assert copy is again and copy is not original
    if name != "reversed" or steps < 12:  # CPython pickles an exhausted one as iter([])
        assert type(copy) is type(original)
    assert take(copy, 40) == take(original, 40)


def test_a_cycle_past_its_first_pass_keeps_its_place(user: types.ModuleType) -> None:
    original = itertools.cycle([1, 2, 3, 4, 5])
    take(original, 7)
    assert take(round_trip(original, user), 12) == take(original, 12)


def test_iterators_sharing_a_source_still_share_it(user: types.ModuleType) -> None:
    source = iter(range(100))
    ch = itertools.chain([-1], source)
    sl = itertools.islice(source, 0, None, 2)
    next(ch), next(ch), next(sl)
    source2, ch2, sl2 = round_trip((source, ch, sl), user)
    for it, it2 in ((ch, ch2), (sl, sl2), (source, source2), (ch, ch2)):
        assert take(it2, 3) == take(it, 3)


def test_tees_share_their_buffer_and_source(user: types.ModuleType) -> None:
    source = itertools.count(1000)
    a, b, c = itertools.tee(source, 3)
    take(a, 70)  # across the 57 values of a buffer link
    take(b, 5)
    a2, b2, c2, source2 = round_trip((a, b, c, source), user)
    steps = [(b, b2, 80), (a, a2, 3), (c, c2, 100), (source, source2, 2), (a, a2, 10)]
    for it, it2, n in steps:
        assert take(it2, n) == take(it, n)
    d, d2 = copy.copy(a), copy.copy(a2)  # a tee's own __copy__: same buffer
    assert take(d2, 5) == take(d, 5)


def test_a_groupby_and_its_current_group_stay_together(user: types.ModuleType) -> None:
    groups = itertools.groupby("aaabbbbcc")
    _, first = next(groups)
    _, second = next(groups)  # the first group is now past: it yields nothing
    next(second)
    groups2, first2, second2 = round_trip((groups, first, second), user)
    assert list(first2) == list(first) == []
    assert list(second2) == list(second) == ["b", "b", "b"]
    assert take(groups2, 5) == take(groups, 5)


def test_an_itertools_subclass_is_refused_by_name(user: types.ModuleType) -> None:
    class Counter(itertools.count):  # type: ignore[type-arg]
        pass

    with pytest.raises(TypeError, match=r"subclass of itertools\.count cannot be carried"):
        round_trip(Counter(), user)


def test_the_itertools_layout_checks_pass_on_this_interpreter() -> None:
    assert {name: iterators._checked(name) for name in iterators._LAYOUTS} == dict.fromkeys(
        iterators._LAYOUTS
    )


# -- other objects of the program -------------------------------------------------------------


def test_partial_deque_pattern_and_exit_stack(user: types.ModuleType) -> None:
    p = functools.partial(user.add, 1)
    d = collections.deque(range(10), maxlen=4)
    pattern = re.compile(r"a+b", re.IGNORECASE)
    stack = contextlib.ExitStack()
    log: list[str] = []
    stack.callback(log.append, "closed")
    p2, again, d2, pattern2, stack2, log2 = round_trip((p, p, d, pattern, stack, log), user)
    assert p2 is again and p2(2) == 3
    assert d2 == d and d2.maxlen == 4
    assert pattern2.pattern == pattern.pattern and pattern2.flags == pattern.flags
    stack2.close()
    assert log2 == ["closed"]


def test_weak_references_to_carried_objects(user: types.ModuleType) -> None:
    thing, gone = user.Thing("kept"), user.Thing("gone")
    fired: list[str] = []
    ref = weakref.ref(thing, lambda r: fired.append("thing"))
    dead = weakref.ref(gone)
    del gone
    values = weakref.WeakValueDictionary({"thing": thing})
    thing2, ref2, again, dead2, values2, fired2 = round_trip(
        (thing, ref, ref, dead, values, fired), user
    )
    assert ref2 is again and ref2() is thing2 and dead2() is None
    assert values2["thing"] is thing2
    del thing2
    import gc

    gc.collect()
    assert ref2() is None and "thing" not in values2 and fired2 == ["thing"]


# -- end to end -------------------------------------------------------------------------------

CORPUS = Path(__file__).parent / "corpus" / "caches"


def _paused_chain(
    script: Path, rng: random.Random, cwd: Path, *, after_first_line: bool = False
) -> tuple[bytes, list[int]]:
    """Run ``script`` under the runtime, SIGTERM it at a random moment (start-up included),
    resume, again, until it ends; return its whole output and the exit codes.

    With ``after_first_line`` the first notice comes once the program has printed its first
    line: a moment inside its own code whatever the machine's load, so that the chain is
    sure to take a pause (random moments alone can all fall in start-up on a loaded machine).
    """
    ckpt = os.path.join(short_dir(), "ck.portal")
    cmd = runtime("run", "--checkpoint", ckpt, str(script))
    out, codes = b"", []
    for attempt in range(4):
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd)
        first = b""
        if attempt == 0 and after_first_line:
            assert proc.stdout is not None
            first = proc.stdout.readline()
            proc.send_signal(signal.SIGTERM)
        elif attempt < 3:
            try:
                proc.wait(timeout=rng.uniform(0.05, 1.0))
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
        stdout = first + stdout
        assert proc.returncode in (0, EXIT_PAUSED, -signal.SIGTERM), stderr.decode()
        if proc.returncode == -signal.SIGTERM:
            # The notice came in the interpreter's own start-up, before any Python code ran
            # (the default action): nothing was written, the previous checkpoint stands.
            assert stdout == b""
            codes.append(proc.returncode)
            continue
        assert b"DeprecationWarning" not in stderr and b"portal:" not in stderr, stderr.decode()
        out += stdout
        codes.append(proc.returncode)
        if proc.returncode == 0:
            break
        cmd = runtime("resume", ckpt)
    return out, codes


@pytest.mark.parametrize("script", ["lru_loop.py", "iter_loop.py"])
def test_a_paused_program_goes_on_as_if_never_paused(
    script: str, tmp_path: Path, rng: random.Random
) -> None:
    (tmp_path / script).write_bytes((CORPUS / script).read_bytes())
    plain = plain_run(tmp_path / script, cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr.decode()
    paused = 0
    for chain in range(3):
        out, codes = _paused_chain(tmp_path / script, rng, tmp_path, after_first_line=chain == 2)
        assert out == plain.stdout, codes
        paused += codes.count(EXIT_PAUSED)
    assert paused, "no run was paused"
