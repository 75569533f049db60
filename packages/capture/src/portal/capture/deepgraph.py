"""Deep object graphs: a chain of objects thousands of links long (a linked list, a game tree, a
chain of constraint variables) pickles and loads like any other state.

The C pickler recurses about three levels per link (an object, its ``__dict__``, the next
object). On CPython 3.11 the levels count against ``sys.getrecursionlimit()`` (332 links at the
default 1000), and a limit the program raised lets the pickle run off the C stack instead (a
segfault, 15000-20000 links in on an 8 MiB stack). On 3.12 and 3.13 they count against the C
recursion limit, fixed when the interpreter is built and not raised by ``sys.setrecursionlimit``
(1500 levels, 499 links, on 3.12.1; 10000 levels, 3333 links, on 3.13.0). A thread with a
larger stack would therefore help 3.11 only, so depth is not bought; it is taken out of the
pickle:

- the first attempt is the plain pickle, so that every other program's checkpoint is exactly what
  it was; on 3.11 it runs under a recursion limit of the current depth plus
  :data:`PICKLE_DEPTH` (raised or lowered for the duration, for every thread, as the limit is
  the interpreter's), which the C stack always holds;
- when it fails for depth, the state is pickled again with the *builds deferred*: a plain
  instance (default reduction, no ``__setstate__``, hashed by identity) is written as an empty
  object of its class, memoized, and its state (``__dict__``, slots, list or dict items) is
  written later at the top level of the pickle, breadth first. Nothing nests then, however long
  the chain; every reference is a memo reference, so identity and cycles are kept.

Loading stays one plain ``pickle.load`` (the unpickler is iterative, whatever the depth): the
deferred states are applied by the pickle's own BUILD (``__dict__`` update, slots through
``setattr``), each when its turn in the pickle comes, all before the load returns. Only plain
instances are deferred because only for them does *when* the state arrives make no difference
to code run while loading: their hash is their identity (a dict or set holding one is built
right while it is still empty), and no ``__setstate__`` of theirs reads other objects.
What cannot be deferred (a chain through constructor arguments, lists nested in lists thousands
deep) still fails, with the pickler's "excessively deep recursion" message, never a crash.
"""

from __future__ import annotations

import collections
import contextlib
import copyreg
import pickle
import sys
from collections.abc import Iterator
from typing import Any

from portal.capture import _rebuild

__all__ = ["PICKLE_DEPTH", "DeferredBuilds", "pickling_depth", "too_deep"]

#: Nesting levels a pickle may use on CPython 3.11 beyond the frames already running (its C
#: stack costs about 150 bytes a level: 1.5 MiB of the main thread's 8 MiB); 3.12 and later
#: bound the C pickler by their own C recursion limit.
PICKLE_DEPTH = 10_000
_SHARED_LIMIT = sys.version_info < (3, 12)  # the C pickler counts against sys's limit


def too_deep(exc: BaseException) -> bool:
    """Whether ``exc`` is a pickle that ran out of depth (cloudpickle turns the RecursionError
    into a PicklingError "excessively deep recursion", from it)."""
    return isinstance(exc, RecursionError) or (
        isinstance(exc, pickle.PicklingError) and isinstance(exc.__cause__, RecursionError)
    )


@contextlib.contextmanager
def pickling_depth() -> Iterator[None]:
    """On CPython 3.11, the recursion limit a pickle runs under: the current depth plus
    :data:`PICKLE_DEPTH`, restored afterwards.

    Raised, it lets a plain pickle take chains ten times longer than the default limit allows
    (the deferred one is needed less often); lowered (a program that set ``10**6``), it keeps
    the C pickler from running off the C stack. Elsewhere a no-op: the C pickler has a limit of
    its own there, and the program's limit is left alone.
    """
    if not _SHARED_LIMIT:
        yield
        return
    previous = sys.getrecursionlimit()
    depth = 0
    frame = sys._getframe()
    while frame is not None:
        depth += 1
        frame = frame.f_back  # type: ignore[assignment]
    try:
        sys.setrecursionlimit(depth + PICKLE_DEPTH)
    except RecursionError:  # within a pickle already (a reducer pickling a part): its limit holds
        yield
        return
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)


class _Build:
    """A deferred build: ``obj``'s state and items, written at the top level of the pickle."""

    __slots__ = ("dictitems", "listitems", "obj", "state")

    def __init__(self, obj: object, state: Any, listitems: Any, dictitems: Any) -> None:
        self.obj = obj
        self.state = state
        self.listitems = listitems
        self.dictitems = dictitems


class _Root:
    """What a deferred pickle dumps in place of the root: the root, then the builds."""

    __slots__ = ("root",)

    def __init__(self, root: object) -> None:
        self.root = root


class _Items:
    __slots__ = ("root",)

    def __init__(self, root: object) -> None:
        self.root = root


class DeferredBuilds:
    """The pickler's half of a deferred pickle (see the module docstring): dump
    :meth:`wrap` of the root, and send every object the pickler's own reducers leave to the
    defaults through :meth:`reduce`."""

    def __init__(self, dispatch_table: Any) -> None:
        self._dispatch_table = dispatch_table
        self._queue: collections.deque[_Build] = collections.deque()
        self._plain: dict[type, bool] = {}

    @staticmethod
    def wrap(root: object) -> object:
        return _Root(root)

    def reduce(self, obj: object) -> Any:
        """``obj``'s reduction, its build deferred where it may be; NotImplemented leaves it to
        the pickler's defaults."""
        t = type(obj)
        if t is _Build:
            b: Any = obj
            # ``same_object`` returns the object made earlier (a memo reference); BUILD, the
            # list's appends and the dict's items then apply to it.
            return (_rebuild.same_object, (b.obj,), b.state, b.listitems, b.dictitems)
        if t is _Root:
            return (_rebuild.deep_root, (_Items(obj.root),))  # type: ignore[attr-defined]
        if t is _Items:
            return (_rebuild.DeepItems, (), None, self._items(obj.root))  # type: ignore[attr-defined]
        plain = self._plain.get(t)
        if plain is None:
            plain = self._plain[t] = self._is_plain(t)
        if not plain:
            return NotImplemented
        reduced = obj.__reduce_ex__(5)  # the checkpoint pickler's protocol
        if (
            not isinstance(reduced, tuple)
            or len(reduced) < 3
            or len(reduced) > 5
            or reduced[0] is not copyreg.__newobj__  # type: ignore[attr-defined]
        ):
            return reduced
        rest = (*reduced[2:], None, None)[:3]
        if all(part is None for part in rest):
            return reduced
        self._queue.append(_Build(obj, *rest))
        return reduced[:2]

    def _is_plain(self, t: type) -> bool:
        cls: Any = t  # its methods, looked up on the class, compared with object's own
        return (
            t not in self._dispatch_table
            and cls.__reduce_ex__ is object.__reduce_ex__
            and cls.__reduce__ is object.__reduce__
            and getattr(cls, "__setstate__", None) is None
            and cls.__hash__ in (object.__hash__, None)
        )

    def _items(self, root: object) -> Iterator[object]:
        """The root, then every deferred build, until none is left. The C pickler fetches an
        item before it writes the one it holds: after each item comes a ``None`` (ignored at
        load), so that the queue is looked at only once every item fetched has been written."""
        yield root
        queue = self._queue
        while True:
            yield None
            if not queue:
                return
            yield queue.popleft()
