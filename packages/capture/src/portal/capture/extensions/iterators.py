"""``itertools`` iterators partway through, and weak references, carried without the
deprecated pickle support.

itertools' own ``__reduce__``/``__setstate__`` warn (``DeprecationWarning``) on 3.12 and 3.13 and
are gone in 3.14, so the ``capture_itertools`` family never calls them. Each iterator's state is
read from its C struct (Modules/itertoolsmodule.c of the running version; the layouts below),
and the iterator is made again with its public constructor from that state. Where the
constructor cannot reach the state (a ``cycle`` past its first pass, a ``product`` partway,
``groupby``'s current group, a ``tee``'s place in its shared buffer), the few hidden fields of
the *freshly made* object are then set exactly as the type's own ``__setstate__`` sets them.

Reading and writing C structs is only sound where the layout is the interpreter's own, so:

* each type's layout is checked once per process, before any use, against probe objects in known
  states (every field read back: objects by identity, counters by value) and against the type's
  ``__basicsize__``; a type whose check fails is refused by name, with the reason;
* an object field is only ever taken from what the type itself reports to the garbage collector
  (``gc.get_referents``): a pointer that is not among them is refused, never dereferenced;
* writes go only into objects made here a moment before, into fields the check has verified.

A ``tee``'s shared buffer travels as its chain of ``_tee_dataobject`` links (their public
constructor), so every ``tee`` of one source still shares one buffer and one source after the
resume. A ``groupby``'s ``_grouper`` still belongs to its ``groupby``. Subclasses of the
itertools types are refused by name.

``capture_weakrefs``: a ``weakref.ref`` (and ``WeakValueDictionary``'s ``KeyedRef``) travels as
a reference to its referent, which the checkpoint carries as it carries any object (so the
reference stays live while the program holds the referent), with its callback; a dead one comes
back dead. Other subclasses of ``weakref.ref`` are refused by name.

The rebuild functions' names are part of the checkpoint format: rename none of them.
"""

from __future__ import annotations

import functools
import gc
import itertools
import operator
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Final, NamedTuple

from portal.core.specs import SerializerSpec

__all__ = [
    "rebuild_accumulate",
    "rebuild_batched",
    "rebuild_chain",
    "rebuild_combinations",
    "rebuild_cycle",
    "rebuild_dropwhile",
    "rebuild_groupby",
    "rebuild_grouper",
    "rebuild_pairwise",
    "rebuild_permutations",
    "rebuild_product",
    "rebuild_takewhile",
    "rebuild_tee",
    "rebuild_weakref",
    "rebuild_zip_longest",
    "serializer_specs",
]

_V: Final = sys.version_info[:2]
_HEAD: Final = 16  # PyObject_HEAD on a 64-bit, non-debug build
_LINKCELLS: Final = 57  # values per _tee_dataobject
_TUPLE_ITEMS: Final = 24  # offset of PyTupleObject.ob_item (PyObject_VAR_HEAD)
_SIZES: Final = {"obj": 8, "ptr": 8, "ssize": 8, "long": 8, "int": 4, "bool": 1}
_CTYPE_NAMES: Final = {
    "ssize": "c_ssize_t",
    "long": "c_long",
    "int": "c_int",
    "bool": "c_bool",
    "ptr": "c_void_p",
}

# The C structs after PyObject_HEAD, in order (Modules/itertoolsmodule.c of each version).
_STATE = [("state", "ptr")] if _V >= (3, 12) else []  # itertools_state *, 3.12+
_FIELDS: Final[dict[str, list[tuple[str, str]]]] = {
    "count": [("cnt", "ssize"), ("long_cnt", "obj"), ("long_step", "obj")],
    "repeat": [("element", "obj"), ("cnt", "ssize")],
    "cycle": [("it", "obj"), ("saved", "obj"), ("index", "ssize"), ("firstpass", "int")],
    "chain": [("source", "obj"), ("active", "obj")],
    "islice": [
        ("it", "obj"),
        ("next", "ssize"),
        ("stop", "ssize"),
        ("step", "ssize"),
        ("cnt", "ssize"),
    ],
    "dropwhile": [("func", "obj"), ("it", "obj"), ("start", "long")],
    "takewhile": [("func", "obj"), ("it", "obj"), ("stop", "long")],
    "starmap": [("func", "obj"), ("it", "obj")],
    "filterfalse": [("func", "obj"), ("it", "obj")],
    "compress": [("data", "obj"), ("selectors", "obj")],
    "product": [("pools", "obj"), ("indices", "ptr"), ("result", "obj"), ("stopped", "int")],
    "combinations": [
        ("pool", "obj"),
        ("indices", "ptr"),
        ("result", "obj"),
        ("r", "ssize"),
        ("stopped", "int"),
    ],
    "combinations_with_replacement": [
        ("pool", "obj"),
        ("indices", "ptr"),
        ("result", "obj"),
        ("r", "ssize"),
        ("stopped", "int"),
    ],
    "permutations": [
        ("pool", "obj"),
        ("indices", "ptr"),
        ("cycles", "ptr"),
        ("result", "obj"),
        ("r", "ssize"),
        ("stopped", "int"),
    ],
    "accumulate": [("total", "obj"), ("it", "obj"), ("binop", "obj"), ("initial", "obj"), *_STATE],
    "zip_longest": [
        ("tuplesize", "ssize"),
        ("numactive", "ssize"),
        ("ittuple", "obj"),
        ("result", "obj"),
        ("fillvalue", "obj"),
    ],
    "groupby": [
        ("it", "obj"),
        ("keyfunc", "obj"),
        ("tgtkey", "obj"),
        ("currkey", "obj"),
        ("currvalue", "obj"),
        ("currgrouper", "ptr"),  # borrowed: compared, never dereferenced
        *_STATE,
    ],
    "_grouper": [("parent", "obj"), ("tgtkey", "obj")],
    "_tee": [("dataobj", "obj"), ("index", "int"), ("weakreflist", "ptr"), *_STATE],
    "_tee_dataobject": [
        ("it", "obj"),
        ("numread", "int"),
        ("running", "int"),
        ("nextlink", "obj"),
        *[(f"values{i}", "obj") for i in range(_LINKCELLS)],
    ],
    "pairwise": [("it", "obj"), ("old", "obj"), *([("result", "obj")] if _V >= (3, 13) else [])],
}
if _V >= (3, 12):
    _FIELDS["batched"] = [
        ("it", "obj"),
        ("batch_size", "ssize"),
        *([("strict", "bool")] if _V >= (3, 13) else []),
    ]


class _Field(NamedTuple):
    offset: int
    kind: str


def _layout(fields: list[tuple[str, str]]) -> tuple[dict[str, _Field], int]:
    """Field offsets as a C compiler lays the struct out (natural alignment), and its size."""
    out: dict[str, _Field] = {}
    at = _HEAD
    for name, kind in fields:
        size = _SIZES[kind]
        at = -(-at // size) * size
        out[name] = _Field(at, kind)
        at += size
    return out, -(-at // 8) * 8


_LAYOUTS: Final = {name: _layout(fields) for name, fields in _FIELDS.items()}


@functools.cache
def _ct() -> Any:
    """ctypes, imported the first time an iterator is read (a program that never pauses with
    one, or never pauses, does not pay for the import)."""
    import ctypes

    return ctypes


def _ctype(kind: str) -> Any:
    return getattr(_ct(), _CTYPE_NAMES[kind])


class _Null:
    """A NULL pointer field, as read."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NULL"


NULL: Final = _Null()


def _refuse(obj: object, reason: str) -> TypeError:
    t = type(obj)
    return TypeError(f"cannot pickle '{t.__module__}.{t.__qualname__}' object: {reason}")


class _View:
    """Reads (and, for objects made here, writes) the fields of one itertools object."""

    def __init__(self, obj: object, name: str) -> None:
        self.obj = obj
        self.fields = _LAYOUTS[name][0]
        self.base = id(obj)
        self._refs: dict[int, object] | None = None

    def _referents(self) -> dict[int, object]:
        if self._refs is None:
            self._refs = {id(r): r for r in gc.get_referents(self.obj)}
        return self._refs

    def address(self, field: str) -> int:
        return int(_ct().c_void_p.from_address(self.base + self.fields[field].offset).value or 0)

    def get(self, field: str) -> Any:
        """An object field (NULL as :data:`NULL`), taken from the object's own referents."""
        pointer = self.address(field)
        if not pointer:
            return NULL
        refs = self._referents()
        if pointer not in refs:
            raise _refuse(self.obj, f"its field {field!r} is not among the objects it reports")
        return refs[pointer]

    def num(self, field: str) -> int:
        f = self.fields[field]
        return int(_ctype(f.kind).from_address(self.base + f.offset).value)

    def array(self, field: str, n: int) -> list[int]:
        """``n`` Py_ssize_t at the pointer in ``field`` (the combinatoric iterators' indices)."""
        pointer = self.address(field)
        if n == 0:
            return []
        if not pointer:
            raise _refuse(self.obj, f"its {field} are missing")
        return list((_ct().c_ssize_t * n).from_address(pointer))

    # -- writes: only into an object made here, fields verified by the layout check ---------

    def set(self, field: str, value: Any) -> None:
        slot = _ct().c_void_p.from_address(self.base + self.fields[field].offset)
        old = self.get(field)
        if value is not NULL:
            _ct().pythonapi.Py_IncRef(_ct().py_object(value))
        slot.value = None if value is NULL else id(value)
        if old is not NULL:
            _ct().pythonapi.Py_DecRef(_ct().py_object(old))  # ``old`` is still held here
        self._refs = None

    def set_num(self, field: str, value: int) -> None:
        f = self.fields[field]
        _ctype(f.kind).from_address(self.base + f.offset).value = value

    def set_array(self, field: str, values: list[int]) -> None:
        if not values:
            return
        pointer = self.address(field)
        if not pointer:
            raise TypeError(f"a new {type(self.obj).__name__} has no {field}")
        array = (_ct().c_ssize_t * len(values)).from_address(pointer)
        for i, v in enumerate(values):
            array[i] = v


# -- the layout check -------------------------------------------------------------------------


class _Is:
    """Expected: this very object."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj


def _matches(view: _View, expected: dict[str, Any]) -> bool:
    for field, want in expected.items():
        kind = view.fields[field].kind
        if kind == "obj":
            got = view.get(field)
            if isinstance(want, _Is):
                if got is not want.obj:
                    return False
            elif want is NULL:
                if got is not NULL:
                    return False
            elif got is NULL or type(got) is not type(want) or got != want:
                return False
        elif kind == "ptr":
            if view.address(field) != want:
                return False
        elif view.num(field) != want:
            return False
    return True


def _probes(name: str) -> Iterator[tuple[object | None, dict[str, Any]]]:
    """Objects of type ``name`` in known states, and the fields they must show (None: a
    mismatch the probe found itself)."""
    # Untyped on purpose: each branch makes objects of other types under the same names.
    it: Any = itertools
    source: Any
    a: Any
    c: Any
    g: Any
    p: Any
    func: Any
    if name == "count":
        c = it.count(5)
        next(c)
        yield c, {"cnt": 6, "long_cnt": NULL, "long_step": 1}
        step = 0.5
        c = it.count(2.5, step)
        next(c)
        yield c, {"long_cnt": 3.0, "long_step": _Is(step)}
    elif name == "repeat":
        element = object()
        r = it.repeat(element, 3)
        next(r)
        yield r, {"element": _Is(element), "cnt": 2}
        yield it.repeat(element), {"element": _Is(element), "cnt": -1}
    elif name == "cycle":
        source = iter("abc")
        c = it.cycle(source)
        next(c), next(c)
        yield c, {"it": _Is(source), "saved": ["a", "b"], "index": 0, "firstpass": 0}
        for _ in range(3):
            next(c)  # "c", then "a" and "b" again from the saved items
        yield c, {"it": NULL, "saved": ["a", "b", "c"], "index": 2, "firstpass": 0}
    elif name == "chain":
        first, second = [1, 2, 3], [4]
        ch = it.chain(first, second)
        next(ch)
        view = _View(ch, name)
        active, source = view.get("active"), view.get("source")
        if (
            type(active).__name__ != "list_iterator"
            or active.__length_hint__() != 2
            or type(source).__name__ != "tuple_iterator"
            or source.__length_hint__() != 1
        ):
            yield None, {}  # a mismatch
        ch = it.chain()
        list(ch)
        yield ch, {"source": NULL, "active": NULL}
    elif name == "islice":
        source = iter(range(100))
        s = it.islice(source, 2, 20, 3)
        next(s)
        yield s, {"it": _Is(source), "next": 5, "stop": 20, "step": 3, "cnt": 3}
        s = it.islice(source, 1)
        yield s, {"it": _Is(source), "next": 0, "stop": 1, "step": 1, "cnt": 0}
        list(s)
        yield s, {"it": NULL}
    elif name in ("dropwhile", "takewhile"):
        pred = operator.not_
        source = iter([0, 0, 1, 0])
        d = getattr(it, name)(pred, source)
        yield (
            d,
            {"func": _Is(pred), "it": _Is(source), "start" if name == "dropwhile" else "stop": 0},
        )
        list(d)
        yield d, {"start" if name == "dropwhile" else "stop": 1}
    elif name in ("starmap", "filterfalse"):
        func, source = operator.not_, iter([(1,)])
        yield getattr(it, name)(func, source), {"func": _Is(func), "it": _Is(source)}
    elif name == "compress":
        data, selectors = iter("ab"), iter([1, 0])
        yield it.compress(data, selectors), {"data": _Is(data), "selectors": _Is(selectors)}
    elif name == "product":
        p = it.product("ab", "xyz")
        yield p, {"pools": (("a", "b"), ("x", "y", "z")), "result": NULL, "stopped": 0}
        for _ in range(5):
            next(p)
        yield p, {"result": ("b", "y"), "stopped": 0}
        if _View(p, name).array("indices", 2) != [1, 1]:
            yield None, {}  # a mismatch
        list(p)
        yield p, {"stopped": 1}
    elif name in ("combinations", "combinations_with_replacement", "permutations"):
        c = getattr(it, name)("abcd", 2)
        yield c, {"pool": ("a", "b", "c", "d"), "result": NULL, "r": 2, "stopped": 0}
        for _ in range(4):
            next(c)
        want = {
            "combinations": (("b", "c"), [1, 2]),
            "combinations_with_replacement": (("a", "d"), [0, 3]),
            "permutations": (("b", "a"), [1, 0, 2, 3]),
        }[name]
        yield c, {"result": want[0], "stopped": 0}
        view = _View(c, name)
        if view.array("indices", len(want[1])) != want[1]:
            yield None, {}  # a mismatch
        if name == "permutations" and view.array("cycles", 2) != [3, 3]:
            yield None, {}  # a mismatch
        list(c)
        yield c, {"stopped": 1}
    elif name == "accumulate":
        source, func = iter([1, 2, 3]), operator.mul
        a = it.accumulate(source, func, initial=5)
        yield a, {"total": NULL, "it": _Is(source), "binop": _Is(func), "initial": 5}
        next(a), next(a)
        yield a, {"total": 5, "initial": None}
        a = it.accumulate(iter([1, 2]))
        next(a)
        yield a, {"total": 1, "initial": None}
    elif name == "zip_longest":
        short, long = iter("ab"), iter("xyz")
        z = it.zip_longest(short, long, fillvalue="-")
        yield z, {"tuplesize": 2, "numactive": 2, "fillvalue": "-"}
        for _ in range(3):
            next(z)
        yield z, {"tuplesize": 2, "numactive": 1, "fillvalue": "-"}
        if _tuple_slots(_View(z, name).get("ittuple")) != [NULL, long]:
            yield None, {}  # a mismatch
    elif name == "groupby":
        source, key = iter("aabc"), str.upper
        g = it.groupby(source, key)
        yield g, {"it": _Is(source), "keyfunc": _Is(key), "tgtkey": NULL, "currkey": NULL}
        _, grouper = next(g)
        yield g, {"tgtkey": "A", "currkey": "A", "currvalue": "a", "currgrouper": id(grouper)}
        next(grouper), next(grouper)
        yield g, {"tgtkey": "A", "currkey": NULL, "currvalue": NULL}
    elif name == "_grouper":
        g = it.groupby("ab")
        _, grouper = next(g)
        yield grouper, {"parent": _Is(g), "tgtkey": "a"}
    elif name == "_tee":
        a, b = it.tee("abcdef")
        next(a), next(a), next(a), next(b)
        link = _View(a, name).get("dataobj")
        yield a, {"dataobj": _Is(link), "index": 3}
        yield b, {"dataobj": _Is(link), "index": 1}
    elif name == "_tee_dataobject":
        if _checked("_tee") is not None:
            yield None, {}  # the tee's own check failed: so does this one
            return
        source = iter(range(100))
        a, b = it.tee(source)
        next(a), next(a), next(a)
        first = _View(a, "_tee").get("dataobj")
        yield (
            first,
            {
                "it": _Is(source),
                "numread": 3,
                "running": 0,
                "nextlink": NULL,
                "values0": 0,
                "values2": 2,
            },
        )
        for _ in range(_LINKCELLS):
            next(a)  # into a second link
        second = _View(a, "_tee").get("dataobj")
        yield first, {"numread": _LINKCELLS, "nextlink": _Is(second), "values56": 56}
        yield second, {"it": _Is(source), "numread": 3, "values0": 57}
    elif name == "pairwise":
        source = iter("abc")
        p = it.pairwise(source)
        yield p, {"it": _Is(source), "old": NULL}
        next(p)
        yield p, {"it": _Is(source), "old": "b"}
        list(p)
        yield p, {"it": NULL, "old": NULL}
    elif name == "batched":
        source = iter("abcde")
        b = it.batched(source, 2)
        next(b)
        yield b, {"it": _Is(source), "batch_size": 2, **({"strict": 0} if _V >= (3, 13) else {})}
        list(b)
        yield b, {"it": NULL}


def _tuple_slots(t: Any) -> list[Any]:
    """The items of a tuple whose slots may be NULL (zip_longest's exhausted iterators)."""
    if type(t) is not tuple:
        return []
    refs = {id(r): r for r in gc.get_referents(t)}
    base = id(t) + _TUPLE_ITEMS
    out = []
    for i in range(len(t)):
        pointer = _ct().c_void_p.from_address(base + 8 * i).value
        out.append(NULL if not pointer else refs.get(pointer, NULL))
    return out


@functools.cache
def _checked(name: str) -> str | None:
    """None when ``itertools.<name>``'s layout above is this interpreter's; else why not."""
    if sys.maxsize != 2**63 - 1:
        return "its state cannot be read on a 32-bit interpreter"
    t = getattr(itertools, name, None)
    if not isinstance(t, type) or name not in _LAYOUTS:
        return "this interpreter's itertools has no such type"
    if t.__basicsize__ != _LAYOUTS[name][1]:
        return (
            f"its C layout on this interpreter ({t.__basicsize__} bytes) is not the one "
            f"Portal reads (Python {_V[0]}.{_V[1]})"
        )
    try:
        for obj, expected in _probes(name):
            if obj is None or not _matches(_View(obj, name), expected):
                return f"its C layout on this interpreter is not the one Portal reads ({name})"
    except (TypeError, ValueError, StopIteration) as exc:
        return f"checking its C layout failed: {exc}"
    return None


def _view(obj: object, name: str) -> _View:
    """A view of ``obj`` (exactly an ``itertools.<name>``), after the layout check."""
    if type(obj) is not getattr(itertools, name):
        raise _refuse(obj, f"a subclass of itertools.{name} cannot be carried")
    reason = _checked(name)
    if reason is not None:
        raise _refuse(obj, reason)
    return _View(obj, name)


def _fresh(obj: object, name: str) -> _View:
    """A view of a freshly made ``obj``, for writing its hidden fields."""
    reason = _checked(name)
    if reason is not None:
        raise TypeError(f"cannot rebuild an itertools.{name}: {reason}")
    return _View(obj, name)


def _opt(value: Any) -> tuple[Any, ...]:
    """A nullable field as pickled: () for NULL, (value,) otherwise (None is a value)."""
    return () if value is NULL else (value,)


# -- reducers and rebuilds --------------------------------------------------------------------

Reduced = tuple[Callable[..., Any], tuple[Any, ...]]


def _reduce_count(obj: Any) -> Reduced:
    v = _view(obj, "count")
    value = v.get("long_cnt")
    return (itertools.count, (v.num("cnt") if value is NULL else value, v.get("long_step")))


def _reduce_repeat(obj: Any) -> Reduced:
    v = _view(obj, "repeat")
    cnt = v.num("cnt")
    element = v.get("element")
    return (itertools.repeat, (element,) if cnt < 0 else (element, cnt))


def _reduce_cycle(obj: Any) -> Reduced:
    v = _view(obj, "cycle")
    saved = v.get("saved")
    if type(saved) is not list:
        raise _refuse(obj, "its saved items are not a list")
    return (rebuild_cycle, (_opt(v.get("it")), list(saved), v.num("index"), v.num("firstpass")))


def rebuild_cycle(it: tuple[Any, ...], saved: list[Any], index: int, firstpass: int) -> Any:
    obj = itertools.cycle(it[0] if it else ())
    v = _fresh(obj, "cycle")
    v.get("saved").extend(saved)
    v.set_num("index", index)
    v.set_num("firstpass", firstpass)
    return obj


def _reduce_chain(obj: Any) -> Reduced:
    v = _view(obj, "chain")
    return (rebuild_chain, (_opt(v.get("source")), _opt(v.get("active"))))


def rebuild_chain(source: tuple[Any, ...], active: tuple[Any, ...]) -> Any:
    if not source:
        return itertools.chain()  # exhausted: its source is gone
    obj = itertools.chain.from_iterable(source[0])
    if active:
        _fresh(obj, "chain").set("active", active[0])
    return obj


def _reduce_islice(obj: Any) -> Reduced:
    v = _view(obj, "islice")
    it = v.get("it")
    if it is NULL:
        return (itertools.islice, ((), 0))
    cnt, stop = v.num("cnt"), v.num("stop")
    # Counted from here: the next item it yields, and where it stops, relative to what it has
    # already taken from ``it`` (the new one starts at 0).
    return (
        itertools.islice,
        (it, v.num("next") - cnt, None if stop < 0 else stop - cnt, v.num("step")),
    )


def _reduce_dropwhile(obj: Any) -> Reduced:
    v = _view(obj, "dropwhile")
    return (rebuild_dropwhile, (v.get("func"), v.get("it"), v.num("start")))


def rebuild_dropwhile(func: Any, it: Any, start: int) -> Any:
    obj = itertools.dropwhile(func, it)
    _fresh(obj, "dropwhile").set_num("start", start)
    return obj


def _reduce_takewhile(obj: Any) -> Reduced:
    v = _view(obj, "takewhile")
    return (rebuild_takewhile, (v.get("func"), v.get("it"), v.num("stop")))


def rebuild_takewhile(func: Any, it: Any, stop: int) -> Any:
    obj = itertools.takewhile(func, it)
    _fresh(obj, "takewhile").set_num("stop", stop)
    return obj


def _reduce_starmap(obj: Any) -> Reduced:
    v = _view(obj, "starmap")
    return (itertools.starmap, (v.get("func"), v.get("it")))


def _reduce_filterfalse(obj: Any) -> Reduced:
    v = _view(obj, "filterfalse")
    return (itertools.filterfalse, (v.get("func"), v.get("it")))


def _reduce_compress(obj: Any) -> Reduced:
    v = _view(obj, "compress")
    return (itertools.compress, (v.get("data"), v.get("selectors")))


def _reduce_product(obj: Any) -> Reduced:
    v = _view(obj, "product")
    pools = v.get("pools")
    started = v.get("result") is not NULL
    indices = v.array("indices", len(pools)) if started else None
    return (rebuild_product, (pools, indices, v.num("stopped")))


def rebuild_product(
    pools: tuple[tuple[Any, ...], ...], indices: list[int] | None, stopped: int
) -> Any:
    obj = itertools.product(*pools)
    v = _fresh(obj, "product")
    if stopped:
        v.set_num("stopped", 1)
    elif indices is not None:
        v.set_array("indices", indices)
        v.set("result", tuple(pool[i] for pool, i in zip(pools, indices, strict=True)))
    return obj


def _reduce_combinatoric(name: str) -> Callable[[Any], Reduced]:
    def reduce(obj: Any) -> Reduced:
        v = _view(obj, name)
        pool, r = v.get("pool"), v.num("r")
        started = v.get("result") is not NULL
        n = len(pool) if name == "permutations" else r
        indices = v.array("indices", n) if started else None
        cycles = v.array("cycles", r) if started and name == "permutations" else None
        if name == "permutations":
            return (rebuild_permutations, (pool, r, indices, cycles, v.num("stopped")))
        return (rebuild_combinations, (name, pool, r, indices, v.num("stopped")))

    return reduce


def rebuild_combinations(
    name: str, pool: tuple[Any, ...], r: int, indices: list[int] | None, stopped: int
) -> Any:
    """``combinations`` or ``combinations_with_replacement`` at the same place."""
    if name not in ("combinations", "combinations_with_replacement"):
        raise ValueError(f"not a combinations type: {name!r}")
    obj = getattr(itertools, name)(pool, r)
    v = _fresh(obj, name)
    if stopped:
        v.set_num("stopped", 1)
    elif indices is not None:
        v.set_array("indices", indices)
        v.set("result", tuple(pool[i] for i in indices))
    return obj


def rebuild_permutations(
    pool: tuple[Any, ...],
    r: int,
    indices: list[int] | None,
    cycles: list[int] | None,
    stopped: int,
) -> Any:
    obj = itertools.permutations(pool, r)
    v = _fresh(obj, "permutations")
    if stopped:
        v.set_num("stopped", 1)
    elif indices is not None and cycles is not None:
        v.set_array("indices", indices)
        v.set_array("cycles", cycles)
        v.set("result", tuple(pool[i] for i in indices[:r]))
    return obj


def _reduce_accumulate(obj: Any) -> Reduced:
    v = _view(obj, "accumulate")
    binop, initial = v.get("binop"), v.get("initial")
    return (
        rebuild_accumulate,
        (
            v.get("it"),
            None if binop is NULL else binop,
            None if initial is NULL else initial,
            _opt(v.get("total")),
        ),
    )


def rebuild_accumulate(it: Any, func: Any, initial: Any, total: tuple[Any, ...]) -> Any:
    obj = itertools.accumulate(it, func, initial=initial)
    if total:
        _fresh(obj, "accumulate").set("total", total[0])
    return obj


def _reduce_zip_longest(obj: Any) -> Reduced:
    v = _view(obj, "zip_longest")
    if v.num("tuplesize") == 0 or v.num("numactive") == 0:
        return (rebuild_zip_longest, ([], None))  # exhausted
    slots = _tuple_slots(v.get("ittuple"))
    if len(slots) != v.num("tuplesize"):
        raise _refuse(obj, "its iterators cannot be read")
    return (rebuild_zip_longest, ([None if s is NULL else s for s in slots], v.get("fillvalue")))


def rebuild_zip_longest(iterators: list[Any], fillvalue: Any) -> Any:
    # An iterator already exhausted is an empty one here: the first call finds it empty and
    # fills its place, as the original does (its count of active iterators then agrees).
    return itertools.zip_longest(
        *[iter(()) if it is None else it for it in iterators], fillvalue=fillvalue
    )


def _reduce_groupby(obj: Any) -> Reduced:
    v = _view(obj, "groupby")
    return (
        rebuild_groupby,
        (
            v.get("it"),
            v.get("keyfunc"),
            _opt(v.get("tgtkey")),
            _opt(v.get("currkey")),
            _opt(v.get("currvalue")),
        ),
    )


def rebuild_groupby(
    it: Any,
    keyfunc: Any,
    tgtkey: tuple[Any, ...],
    currkey: tuple[Any, ...],
    currvalue: tuple[Any, ...],
) -> Any:
    obj = itertools.groupby(it, keyfunc)
    v = _fresh(obj, "groupby")
    for field, value in (("tgtkey", tgtkey), ("currkey", currkey), ("currvalue", currvalue)):
        if value:
            v.set(field, value[0])
    return obj


def _reduce_grouper(obj: Any) -> Reduced:
    v = _view(obj, "_grouper")
    parent = v.get("parent")
    if type(parent) is not itertools.groupby:
        raise _refuse(obj, "its groupby cannot be read")
    current = _view(parent, "groupby").address("currgrouper") == id(obj)
    return (rebuild_grouper, (parent, v.get("tgtkey"), current))


def rebuild_grouper(parent: Any, tgtkey: Any, current: bool) -> Any:
    """A group of ``parent``: its current one (it yields the group's next items), or one the
    groupby has moved past (it yields nothing, as before)."""
    if current:
        return itertools._grouper(parent, tgtkey)  # type: ignore[attr-defined]
    past: Any = itertools.groupby(())
    return itertools._grouper(past, tgtkey)  # type: ignore[attr-defined]


def _reduce_tee(obj: Any) -> Reduced:
    v = _view(obj, "_tee")
    return (rebuild_tee, (v.get("dataobj"), v.num("index")))


def rebuild_tee(link: Any, index: int) -> Any:
    """A ``tee`` at ``index`` of the shared buffer ``link`` (every ``tee`` of one source shares
    its links, so they share the buffer and the source as before)."""
    obj = itertools._tee(iter(()))  # type: ignore[attr-defined]
    v = _fresh(obj, "_tee")
    v.set("dataobj", link)
    v.set_num("index", index)
    return obj


def _reduce_tee_link(obj: Any) -> Reduced:
    v = _view(obj, "_tee_dataobject")
    if v.num("running"):
        raise _refuse(obj, "its tee is running (its source is being read)")
    numread = v.num("numread")
    values = [v.get(f"values{i}") for i in range(numread)]
    nextlink = v.get("nextlink")
    it = v.get("it")
    link_type = type(obj)
    return (
        link_type,
        (iter(()) if it is NULL else it, values, None if nextlink is NULL else nextlink),
    )


def _reduce_pairwise(obj: Any) -> Reduced:
    v = _view(obj, "pairwise")
    return (rebuild_pairwise, (_opt(v.get("it")), _opt(v.get("old"))))


def rebuild_pairwise(it: tuple[Any, ...], old: tuple[Any, ...]) -> Any:
    obj = itertools.pairwise(it[0] if it else ())
    if old:
        _fresh(obj, "pairwise").set("old", old[0])
    return obj


def _reduce_batched(obj: Any) -> Reduced:
    v = _view(obj, "batched")
    it = v.get("it")
    strict = bool(v.num("strict")) if _V >= (3, 13) else False
    return (rebuild_batched, (_opt(it), v.num("batch_size"), strict))


def rebuild_batched(it: tuple[Any, ...], n: int, strict: bool) -> Any:
    kwargs = {"strict": True} if strict else {}
    return itertools.batched(it[0] if it else (), n, **kwargs)  # type: ignore[attr-defined]


_ITERTOOLS_REDUCERS: Final[dict[str, Callable[[Any], Reduced]]] = {
    "count": _reduce_count,
    "repeat": _reduce_repeat,
    "cycle": _reduce_cycle,
    "chain": _reduce_chain,
    "islice": _reduce_islice,
    "dropwhile": _reduce_dropwhile,
    "takewhile": _reduce_takewhile,
    "starmap": _reduce_starmap,
    "filterfalse": _reduce_filterfalse,
    "compress": _reduce_compress,
    "product": _reduce_product,
    "combinations": _reduce_combinatoric("combinations"),
    "combinations_with_replacement": _reduce_combinatoric("combinations_with_replacement"),
    "permutations": _reduce_combinatoric("permutations"),
    "accumulate": _reduce_accumulate,
    "zip_longest": _reduce_zip_longest,
    "groupby": _reduce_groupby,
    "_grouper": _reduce_grouper,
    "_tee": _reduce_tee,
    "_tee_dataobject": _reduce_tee_link,
    "pairwise": _reduce_pairwise,
    "batched": _reduce_batched,
}


# -- weak references --------------------------------------------------------------------------


class _Gone:
    """The referent of a weak reference that is already dead (made, referred to, dropped)."""


def _reduce_weakref(ref: Any) -> Reduced:
    t = type(ref)
    if t is not weakref.ref and t is not weakref.KeyedRef:
        raise _refuse(ref, f"a weak reference of type {t.__qualname__} cannot be carried")
    referent = ref()
    callback = ref.__callback__ if referent is not None else None
    key = (ref.key,) if t is weakref.KeyedRef else ()
    return (rebuild_weakref, (referent is not None, referent, callback, key))


def rebuild_weakref(alive: bool, referent: Any, callback: Any, key: tuple[Any, ...]) -> Any:
    """A weak reference to ``referent`` (a ``KeyedRef`` when ``key`` is given); a dead one
    when ``alive`` is false."""
    target = referent if alive else _Gone()
    if key:
        ref: Any = weakref.KeyedRef(target, callback, key[0])
    else:
        ref = weakref.ref(target, callback)
    del target  # a dead one dies here (no callback: a dead reference has none)
    return ref


def serializer_specs() -> list[SerializerSpec]:
    return [
        SerializerSpec(
            name="capture_itertools",
            reducers={
                f"itertools.{name}": reducer
                for name, reducer in _ITERTOOLS_REDUCERS.items()
                if name in _LAYOUTS
            },
            description="itertools iterators partway through, read from their C state and made "
            "again at the same place (no deprecated itertools pickling)",
        ),
        SerializerSpec(
            name="capture_weakrefs",
            reducers={"_weakref.ReferenceType": _reduce_weakref},
            description="weak references (and WeakValueDictionary's) to carried objects",
        ),
    ]
