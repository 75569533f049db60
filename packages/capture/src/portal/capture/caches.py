"""``functools.lru_cache`` / ``functools.cache`` wrappers, carried with their contents, their order
and their statistics: a wrapper of any callable the checkpoint can carry (the program's own
function, a builtin such as ``math.factorial``, a bound method of a carried object such as a
pattern's ``search``, a library function), unless it is importable by name as that very object (a
library's decorated function), which travels by reference (:func:`importable_as_itself`).

Python offers no API to read a cache's entries, so this module reads them from what the C type
tells the garbage collector (``gc.get_referents``): CPython's ``lru_cache_tp_traverse``
(Modules/_functoolsmodule.c, the same in 3.11, 3.12 and 3.13) visits the wrapper's type, then for
a bounded cache each link of its LRU list from the least recently used on (its key, its result,
its type), then the cache dict, the wrapped function, the keyword marker, the link type, the
``CacheInfo`` type and the wrapper's ``__dict__``. An unbounded cache keeps no links: its dict
maps each key to its result directly. Every capture checks that shape against the wrapper (the
dict's keys are exactly the links' keys, the sizes agree with ``cache_info()``), and the order of
the links is checked once per process on a cache of known history; if anything disagrees the
cache is carried empty, with a note at resume. The keys are the C code's own
(``lru_cache_make_key``): decoded back into the call's arguments here, so that the new process
builds its own keys (its keyword marker, its hashes).

At resume the cache is filled by calling the new wrapper with each entry's arguments, least
recently used first, while the function the wrapper calls is a *feeder* that returns the stored
result (the program's function is never called); then the hit and miss counts are set. The C
object has no API for either, so both are written into the ``lru_cache_object`` struct at
offsets checked once per process against a probe cache (every field read back, a swap and the
counters written and read through ``cache_info()``); a check that fails leaves the cache empty,
with a note. The refill runs once the whole checkpoint has loaded (``after_restore``), so the
keys' ``__hash__``/``__eq__`` see finished objects and classes.

The functions the pickle names (:func:`rebuild_lru_cache`, :func:`restore_lru_cache`) are part of
the checkpoint format: rename neither.
"""

from __future__ import annotations

import functools
import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final, NamedTuple, TypeAlias

from portal.capture.notes import note_on_restore
from portal.capture.restoring import after_restore

__all__ = [
    "CacheEntry",
    "cached_function",
    "importable_as_itself",
    "lru_cache_state",
    "rebuild_lru_cache",
    "restore_lru_cache",
    "restore_wrapper_attributes",
    "without_contents",
]

#: One cache entry as carried: the call's positional and keyword arguments and its result.
CacheEntry: TypeAlias = tuple[tuple[Any, ...], dict[str, Any] | None, Any]

# Called with its C constructor's arguments below, which typeshed does not describe.
_WRAPPER_TYPE: Final[Any] = functools._lru_cache_wrapper
_STATE_KEY: Final = "portal_lru_cache"  # marks the state dict's format (version 1)

# lru_cache_object (Modules/_functoolsmodule.c, 3.11-3.13, 64-bit, non-debug): an lru_list_elem
# root (PyObject_HEAD 16, prev 8, next 8, hash 8, key 8, result 8), then the wrapper function
# pointer, int typed (padded to 8), cache, hits, func, maxsize, misses, kwd_mark,
# lru_list_elem_type, cache_info_type, dict, weakreflist.
_OFF_TYPED: Final = 64
_OFF_CACHE: Final = 72
_OFF_HITS: Final = 80
_OFF_FUNC: Final = 88
_OFF_MAXSIZE: Final = 96
_OFF_MISSES: Final = 104
_OFF_KWD_MARK: Final = 112
_BASICSIZE: Final = 152
_DICTOFFSET: Final = 136
_WEAKLISTOFFSET: Final = 144


class _Unreadable(Exception):
    """The cache's contents cannot be read soundly (the message says why)."""


class _Parts(NamedTuple):
    """What ``gc.get_referents`` shows of one wrapper."""

    entries: list[tuple[Any, Any]]  # (C key, result), least recently used first
    cache: dict[Any, Any]
    func: Any
    kwd_mark: object


# -- reading (the old process) ----------------------------------------------------------------


def _parts(wrapper: Any) -> _Parts:
    info = _WRAPPER_TYPE.cache_info(wrapper)  # the C method (a __dict__ entry cannot shadow it)
    _ = wrapper.__dict__  # made if missing, so that the traversal always visits it
    refs = gc.get_referents(wrapper)
    if len(refs) < 7 or refs[0] is not type(wrapper) or refs[-1] is not wrapper.__dict__:
        raise _Unreadable("its C traversal has an unexpected shape")
    cache, func, kwd_mark, link_type = refs[-6], refs[-5], refs[-4], refs[-3]
    if type(cache) is not dict or type(kwd_mark) is not object or not isinstance(link_type, type):
        raise _Unreadable("its C traversal has an unexpected shape")
    links = refs[1:-6]
    if info.maxsize is None or info.maxsize == 0:  # unbounded (key -> result), or no cache
        if links or len(cache) != info.currsize:
            raise _Unreadable("its C traversal has an unexpected shape")
        return _Parts(list(cache.items()), cache, func, kwd_mark)
    n, rest = divmod(len(links), 3)
    if rest or n != len(cache) or n != info.currsize:
        raise _Unreadable("its C traversal does not match its size")
    entries = [(links[3 * i], links[3 * i + 1]) for i in range(n)]
    if any(links[3 * i + 2] is not link_type for i in range(n)):
        raise _Unreadable("its C traversal has an unexpected shape")
    if any(type(link) is not link_type for link in cache.values()):
        raise _Unreadable("its cache dict holds something other than its links")
    if {id(k) for k in cache} != {id(k) for k, _ in entries}:
        raise _Unreadable("its links' keys are not its cache dict's keys")
    return _Parts(entries, cache, func, kwd_mark)


def _decode_key(key: Any, typed: bool, kwd_mark: object) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments of the call that made ``key`` (the inverse of ``lru_cache_make_key``)."""
    if type(key) is not tuple:
        if typed or type(key) not in (int, str):
            raise _Unreadable(f"a key of an unexpected type ({type(key).__name__})")
        return (key,), {}  # one exact int or str argument is its own key
    mark = next((i for i, part in enumerate(key) if part is kwd_mark), None)
    if not typed:
        if mark is None:
            return key, {}
        args, pairs = key[:mark], key[mark + 1 :]
        if len(pairs) % 2 or not pairs:
            raise _Unreadable("a key with keyword arguments of an unexpected shape")
        return args, _keywords(pairs)
    if mark is None:
        nargs, odd = divmod(len(key), 2)
        if odd:
            raise _Unreadable("a typed key of an unexpected shape")
        args, types = key[:nargs], key[nargs:]
        kwargs: dict[str, Any] = {}
    else:
        args = key[:mark]
        nkw, odd = divmod(len(key) - 2 * mark - 1, 3)
        if odd or nkw < 1:
            raise _Unreadable("a typed key of an unexpected shape")
        kwargs = _keywords(key[mark + 1 : mark + 1 + 2 * nkw])
        types = key[mark + 1 + 2 * nkw :]
    values = (*args, *kwargs.values())
    if len(types) != len(values) or any(
        t is not type(v) for t, v in zip(types, values, strict=True)
    ):
        raise _Unreadable("a typed key whose types do not match its arguments")
    return args, kwargs


def _keywords(pairs: tuple[Any, ...]) -> dict[str, Any]:
    names = pairs[0::2]
    if not all(type(name) is str for name in names) or len(set(names)) != len(names):
        raise _Unreadable("a key with keyword arguments of an unexpected shape")
    return dict(zip(names, pairs[1::2], strict=True))


@functools.cache
def _reading_checked() -> str | None:
    """None when reading a cache gives what the C code holds, in LRU order (checked once on
    caches of known history); else why not."""
    try:

        def probe(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
            return (args, kwargs)

        bounded = _WRAPPER_TYPE(probe, 4, False, functools._CacheInfo)
        for args, kwargs in (((1,), {}), (("a", 2), {}), ((1,), {}), ((), {"k": 3}), ((7,), {})):
            bounded(*args, **kwargs)
        bounded(1)  # used again: now the most recent
        typed = _WRAPPER_TYPE(probe, None, True, functools._CacheInfo)
        typed(1, x=2.0)
        typed(1.0)
        got = [_entries_of(bounded, False), _entries_of(typed, True)]
        want = [
            [(("a", 2), {}), ((), {"k": 3}), ((7,), {}), ((1,), {})],
            [((1,), {"x": 2.0}), ((1.0,), {})],
        ]
        got_plain = [[(a, k) for a, k, _ in entries] for entries in got]
        if got_plain != want or any(r != probe(*a, **k) for a, k, r in got[0] + got[1]):
            return "reading a probe cache gave other entries than it holds"
    except _Unreadable as exc:
        return f"reading a probe cache failed: {exc}"
    return None


def _entries_of(wrapper: Any, typed: bool) -> list[tuple[tuple[Any, ...], dict[str, Any], Any]]:
    parts = _parts(wrapper)
    out = []
    for key, result in parts.entries:
        args, kwargs = _decode_key(key, typed, parts.kwd_mark)
        out.append((args, kwargs, result))
    return out


def lru_cache_state(wrapper: Any) -> dict[str, Any]:
    """The carried state of an ``lru_cache`` wrapper: its attributes (``__wrapped__`` aside: the
    wrapper is rebuilt around the function), and its contents and statistics (``entries``
    None, with the reason in ``unread``, when they cannot be read soundly here)."""
    attrs = {k: v for k, v in wrapper.__dict__.items() if k != "__wrapped__"}
    info = _WRAPPER_TYPE.cache_info(wrapper)
    state: dict[str, Any] = {
        _STATE_KEY: 1,
        "attrs": attrs,
        "hits": info.hits,
        "misses": info.misses,
        "entries": None,
        "unread": None,
    }
    reason = _reading_checked()
    if reason is None:
        try:
            typed = bool(wrapper.cache_parameters()["typed"])
            entries: list[CacheEntry] = [
                (args, kwargs or None, result)
                for args, kwargs, result in _entries_of(wrapper, typed)
            ]
        except _Unreadable as exc:
            reason = str(exc)
        except Exception as exc:  # no cache_parameters (a hand-made wrapper), say
            reason = f"{type(exc).__name__}: {exc}"
        else:
            state["entries"] = entries
    state["unread"] = reason
    return state


def without_contents(state: dict[str, Any], reason: str) -> dict[str, Any]:
    """``state`` with no entries (the cache comes back empty, with ``reason`` in a note)."""
    return {**state, "entries": None, "unread": f"its contents cannot be carried ({reason})"}


# -- writing (the new process) ----------------------------------------------------------------


@functools.cache
def _layout_checked() -> str | None:
    """None when the ``lru_cache_object`` offsets above are this interpreter's (every field of a
    probe cache read back, the function swapped and the counters set through them); else why
    not. Nothing is written into a wrapper unless this passed."""
    if sys.maxsize != 2**63 - 1:
        return "not a 64-bit interpreter"
    t = _WRAPPER_TYPE
    if (t.__basicsize__, t.__dictoffset__, t.__weakrefoffset__) != (
        _BASICSIZE,
        _DICTOFFSET,
        _WEAKLISTOFFSET,
    ):
        return f"functools._lru_cache_wrapper is laid out differently ({t.__basicsize__} bytes)"
    try:
        import ctypes
    except ImportError as exc:
        return f"ctypes is not available ({exc})"

    def probe(x: Any) -> Any:
        return ("probe", x)

    def feeder(x: Any) -> Any:
        return ("fed", x)

    wrapper = _WRAPPER_TYPE(probe, 5, True, functools._CacheInfo)
    for x in (1, 2, 1, 3, 1):
        wrapper(x)  # 2 hits, 3 misses
    base = id(wrapper)
    parts = _parts(wrapper)
    seen = (
        ctypes.c_ssize_t.from_address(base + _OFF_HITS).value,
        ctypes.c_ssize_t.from_address(base + _OFF_MISSES).value,
        ctypes.c_ssize_t.from_address(base + _OFF_MAXSIZE).value,
        ctypes.c_int.from_address(base + _OFF_TYPED).value,
        ctypes.c_void_p.from_address(base + _OFF_FUNC).value,
        ctypes.c_void_p.from_address(base + _OFF_CACHE).value,
        ctypes.c_void_p.from_address(base + _OFF_KWD_MARK).value,
    )
    if seen != (2, 3, 5, 1, id(probe), id(parts.cache), id(parts.kwd_mark)):
        return "a probe cache's fields are not where this interpreter's layout puts them"
    _set_func(wrapper, probe, feeder)
    fed = wrapper(4)
    _set_func(wrapper, feeder, probe)
    _set_counts(wrapper, 7, 11)
    info = _WRAPPER_TYPE.cache_info(wrapper)
    if fed != ("fed", 4) or wrapper(5) != ("probe", 5) or (info.hits, info.misses) != (7, 11):
        return "writing a probe cache's fields did not have the expected effect"
    return None


def _set_func(wrapper: Any, old: Any, new: Any) -> None:
    """Make the C wrapper call ``new`` instead of ``old`` (its reference moves with it)."""
    import ctypes

    slot = ctypes.c_void_p.from_address(id(wrapper) + _OFF_FUNC)
    if slot.value != id(old):
        raise RuntimeError("the cache's function is not the one expected")
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(new))
    slot.value = id(new)
    ctypes.pythonapi.Py_DecRef(ctypes.py_object(old))  # the caller still holds ``old``


def _set_counts(wrapper: Any, hits: int, misses: int) -> None:
    import ctypes

    ctypes.c_ssize_t.from_address(id(wrapper) + _OFF_HITS).value = hits
    ctypes.c_ssize_t.from_address(id(wrapper) + _OFF_MISSES).value = misses


class _Feeder:
    """Stands in for the program's function while a cache is refilled: returns the result it
    is given for the call being replayed."""

    def __init__(self) -> None:
        self.result: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.result


@contextmanager
def _feeding(wrapper: Any, func: Any) -> Iterator[_Feeder]:
    feeder = _Feeder()
    _set_func(wrapper, func, feeder)
    try:
        yield feeder
    finally:
        _set_func(wrapper, feeder, func)


def _wrapped_func(wrapper: Any) -> Any:
    return _parts(wrapper).func


def _refill(wrapper: Any, state: dict[str, Any]) -> None:
    name = getattr(wrapper, "__qualname__", "?")
    entries: list[CacheEntry] | None = state.get("entries")
    reason = state.get("unread")
    if entries is None:
        _note_empty(name, reason or "its contents were not carried")
        return
    hits, misses = int(state["hits"]), int(state["misses"])
    if not entries and hits == 0 and misses == 0:
        return  # nothing to restore
    reason = _layout_checked()
    if reason is not None:
        _note_empty(name, reason)
        return
    try:
        with _feeding(wrapper, _wrapped_func(wrapper)) as feeder:
            for args, kwargs, result in entries:
                feeder.result = result
                wrapper(*args, **(kwargs or {}))
    except Exception as exc:  # a key that cannot be hashed or compared here, say
        _WRAPPER_TYPE.cache_clear(wrapper)
        _note_empty(name, f"refilling it raised {type(exc).__name__}: {exc}")
        return
    _set_counts(wrapper, hits, misses)


def _note_empty(name: str, reason: str) -> None:
    note_on_restore(f"the functools.lru_cache of {name} comes back empty: {reason}")


# -- which wrappers travel by value -----------------------------------------------------------


def cached_function(wrapper: Any) -> Any:
    """The callable ``wrapper`` calls: the C wrapper's own (``__wrapped__`` is only an attribute
    a program may change), or ``__wrapped__`` where the wrapper cannot be read."""
    try:
        return _parts(wrapper).func
    except _Unreadable:
        return getattr(wrapper, "__wrapped__", None)


def importable_as_itself(wrapper: Any, user_modules: frozenset[str]) -> bool:
    """Whether ``wrapper`` is found by its ``__module__`` and ``__qualname__`` as this very object,
    in a module that is not the program's own (an ``lru_cache``-decorated function of an
    installed package): then it travels by reference, as pickle names it. ``update_wrapper``
    copies the names of what is wrapped, so a cache over ``math.factorial`` or over a pattern's
    ``search`` is *named* like that callable but is not it; and a user module's globals are
    carried by value, so a wrapper there is too."""
    module_name = getattr(wrapper, "__module__", None)
    qualname = getattr(wrapper, "__qualname__", None)
    if not isinstance(module_name, str) or not isinstance(qualname, str):
        return False
    if module_name in user_modules or module_name == "__main__":
        return False
    obj: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        if obj is None or part == "<locals>":
            return False
        obj = getattr(obj, part, None)
    return obj is wrapper


# -- what the pickle calls --------------------------------------------------------------------


def rebuild_lru_cache(func: Any, maxsize: int | None, typed: bool) -> Any:
    """A new ``lru_cache`` wrapper around ``func``, empty until :func:`restore_lru_cache`."""
    return functools.lru_cache(maxsize=maxsize, typed=typed)(func)


def restore_lru_cache(wrapper: Any, state: dict[str, Any]) -> None:
    """Give the rebuilt ``wrapper`` its attributes now, and its contents and statistics once the
    whole checkpoint has loaded."""
    restore_wrapper_attributes(wrapper, state["attrs"])
    after_restore(functools.partial(_refill, wrapper, state))


def restore_wrapper_attributes(wrapper: Any, attrs: dict[str, Any]) -> None:
    """The wrapper's ``__dict__`` (a checkpoint made before caches were carried holds only
    this: its cache comes back empty)."""
    wrapper.__dict__.update(attrs)
