"""Re-made objects: a value that owns a thread, a process, a socket or a lock held by a worker
travels as *what made it*, and is made again at the resume, so that it continues.

A ``SummaryWriter``, a ``QueueListener``, a thread pool: pickle refuses each (a thread is part
of the process), and carrying them by value would be wrong anyway, since their worker is not
carried. What a resumed program needs is an object of the same class, made the way the first
one was, whose worker runs again in the new process. So such an object travels as a *recipe*:
a factory and its arguments (pickled like any value: the queue it drains, the handlers it
feeds, a log directory). At the resume the pickle makes a stand-in of the object's class at
once (the program's references keep their identity), and the factory runs once the restore is
done (:func:`portal.capture.restoring.after_restore`), so the job's working directory, its
environment and its other re-made objects (an object's parts first) are back before it runs:

* ``factory is type(obj)``: the class's own ``__init__`` runs on the stand-in, which *is* the
  object again (its worker threads are bound to it, ``self is obj`` holds);
* any other factory (``wandb.init``, a function of the program's): the object it returns gives
  the stand-in its ``__dict__`` (the two share one), and is kept alive for the process's life
  (its ``__del__`` would otherwise close what the stand-in now uses).

Whatever the object must finish before it can travel (flush what its queue holds, let its
workers go idle) is done first, at the pause: by the reducer that returns :func:`remade` (a
plugin's), or by the ``quiesce`` the program gave :func:`register`. A value that is busy (a
thread pool with work in flight) raises :class:`~portal.core.specs.WaitForSafePoint`: the
pause is taken a few lines later, once it is idle.

A worker made again waits again on what it waited on: a queue or an event that one of its
threads waits on travels without that waiter (:func:`thread_is_remade`). One that a thread
*not* made again waits on is refused, naming the thread: that thread would be lost.

Some objects must finish something before a pause reads the program's state, because the
paused process exits without running their ``atexit`` hooks (wandb's run, whose service writes
its history to the run's file only at intervals or at the finish): :func:`before_pause`, undone
if the pause is not taken. Library globals that a library makes again itself (dynamo's) are
left out of the checkpoint: :func:`remade_globals`.

Two ways to use it, one mechanism:

* a capture plugin's reducer (``portal_serializers``) returns ``remade(obj, factory, *args,
  **kwargs)`` for the type it knows (the built-in ones: :mod:`.extensions.workers`);
* a program registers one object: ``portal.runtime.remake(obj, factory, *args, **kwargs)``
  (:func:`register`), for a class of its own that owns a thread, say. The registration goes by
  identity and wins over any plugin's reducer for the type.

The rebuild function's name is part of the checkpoint format: do not rename it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from portal.capture.restoring import after_restore

__all__ = [
    "Recipe",
    "become",
    "before_pause",
    "finish_before_pause",
    "made_at_load",
    "rebuild_remade",
    "recipe_of",
    "register",
    "registered_types",
    "remade",
    "remade_globals",
    "remakes_threads",
    "thread_is_remade",
    "transient_globals",
    "undo_before_pause",
]


def remade(obj: object, factory: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """The ``__reduce__`` value that makes ``obj`` again at the resume as
    ``factory(*args, **kwargs)`` (see the module docstring for what happens when)."""
    return (rebuild_remade, (type(obj), factory, args, kwargs))


#: The objects the factories made at this process's resumes (see the module docstring).
_KEPT: list[object] = []


def _stand_in(cls: Any) -> Any:
    try:
        return object.__new__(cls)
    except TypeError:  # a C base of its own ("object.__new__(X) is not safe")
        return cls.__new__(cls)


def rebuild_remade(
    cls: Any, factory: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> Any:
    """A stand-in of ``cls`` now; made for real by ``factory`` once the restore is done."""
    obj = _stand_in(cls)

    def make() -> None:
        if factory is cls:
            initialise: Any = cls.__init__
            initialise(obj, *args, **kwargs)
            return
        made = factory(*args, **kwargs)
        if not hasattr(made, "__dict__"):
            raise TypeError(
                f"cannot make a {cls.__qualname__} again: its factory {_name(factory)} "
                f"returned a {type(made).__qualname__}, which has no __dict__ to give it"
            )
        become(obj, made)

    after_restore(make)
    return obj


def become(obj: Any, made: Any) -> None:
    """``obj`` takes on ``made``: its class where it differs, its ``__dict__`` (shared from now
    on, so ``made``, kept alive for the process's life, never closes what ``obj`` uses), and its
    registration (a factory that registers what it makes: ``torch.compile``'s wrapper)."""
    if type(made) is not type(obj):
        obj.__class__ = type(made)
    obj.__dict__ = made.__dict__
    _KEPT.append(made)
    recipe = recipe_of(made)
    if recipe is not None:
        register(obj, recipe.factory, recipe.args, recipe.kwargs, recipe.quiesce)


def made_at_load(
    factory: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> Any:
    """``factory(*args, **kwargs)`` while the pickle loads: for a value with no stand-in (a
    function: ``torch.compile``'s wrapper), whose factory needs nothing restored first."""
    return factory(*args, **kwargs)


def _name(factory: object) -> str:
    return getattr(factory, "__qualname__", None) or repr(factory)


# -- the program's registrations -------------------------------------------------------------


class Recipe:
    """How one registered object is made again, and what it does before it travels."""

    __slots__ = ("args", "at_load", "factory", "kwargs", "quiesce")

    def __init__(
        self,
        factory: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        quiesce: Callable[[Any], object] | None,
        at_load: bool = False,
    ) -> None:
        self.factory = factory
        self.args = args
        self.kwargs = kwargs
        self.quiesce = quiesce
        self.at_load = at_load

    def reduce(self, obj: object) -> Any:
        if self.quiesce is not None:
            self.quiesce(obj)
        if self.at_load:
            return (made_at_load, (self.factory, self.args, self.kwargs))
        return remade(obj, self.factory, *self.args, **self.kwargs)


#: Registered objects by ``id``: (a weak reference to the object, or the object itself where it
#: takes none, and its recipe). A weak entry leaves with its object.
_REGISTERED: dict[int, tuple[Any, Recipe]] = {}
#: How many registered objects each type has (the pickler looks only at these types).
_TYPES: dict[type, int] = {}


def register(
    obj: object,
    factory: Callable[..., Any],
    args: tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
    quiesce: Callable[[Any], object] | None = None,
    *,
    at_load: bool = False,
) -> None:
    """Carry ``obj`` as ``factory(*args, **kwargs)`` (``quiesce(obj)`` first, at each pause and
    check): the implementation of ``portal.runtime.remake``. Registering again replaces the
    recipe. ``at_load``: made while the pickle loads, with no stand-in (:func:`made_at_load`)."""
    if not callable(factory):
        raise TypeError(
            f"portal.runtime.remake: the factory must be callable (the class, or a function "
            f"that makes the object again), not {type(factory).__qualname__}"
        )
    if quiesce is not None and not callable(quiesce):
        raise TypeError(
            "portal.runtime.remake: quiesce must be callable with the object (its flush, say), "
            f"not {type(quiesce).__qualname__}"
        )
    if not at_load and factory is not type(obj) and not hasattr(obj, "__dict__"):
        raise TypeError(
            f"portal.runtime.remake: a {type(obj).__qualname__} has no __dict__, so only its "
            "own class can make it again: pass the class as the factory"
        )
    key = id(obj)
    recipe = Recipe(factory, tuple(args), dict(kwargs or {}), quiesce, at_load)
    if key in _REGISTERED:
        _REGISTERED[key] = (_REGISTERED[key][0], recipe)
        return
    cls = type(obj)
    try:
        holder: Any = weakref.ref(obj, lambda _ref: _forget(key, cls))
    except TypeError:  # no weak references to it: held for the process's life
        holder = obj
    _REGISTERED[key] = (holder, recipe)
    _TYPES[cls] = _TYPES.get(cls, 0) + 1


def _forget(key: int, cls: type) -> None:
    if _REGISTERED.pop(key, None) is not None:
        left = _TYPES.get(cls, 1) - 1
        if left:
            _TYPES[cls] = left
        else:
            _TYPES.pop(cls, None)


def registered_types() -> Mapping[type, int]:
    """The types that have registered objects (empty in most programs: nothing to look up)."""
    return _TYPES


def recipe_of(obj: object) -> Recipe | None:
    """``obj``'s recipe, if the program registered it."""
    entry = _REGISTERED.get(id(obj))
    if entry is None:
        return None
    holder, recipe = entry
    target = holder() if isinstance(holder, weakref.ref) else holder
    return recipe if target is obj else None


# -- threads that are made again --------------------------------------------------------------

#: Qualified names of the types whose instances a plugin's reducer makes again, worker threads
#: included (:func:`remakes_threads`).
_THREAD_OWNERS: set[str] = set()


def remakes_threads(*type_names: str) -> None:
    """Declare that a plugin's reducer makes instances of these types (``"module.Qualname"``)
    again with their worker threads: a queue or an event one of those threads waits on then
    travels without the waiter (:func:`thread_is_remade`)."""
    _THREAD_OWNERS.update(type_names)


def thread_is_remade(thread: object) -> bool:
    """Whether ``thread`` is made again at the resume, with the object that owns it: its target
    is a bound method of an object the program registered, or of a type a plugin declared
    (:func:`remakes_threads`). Any other thread is lost at the pause, so what it waits on cannot
    travel without it."""
    owner = getattr(getattr(thread, "_target", None), "__self__", None)
    for candidate in (owner, thread):
        if candidate is None:
            continue
        t = type(candidate)
        if recipe_of(candidate) is not None or f"{t.__module__}.{t.__qualname__}" in _THREAD_OWNERS:
            return True
    return False


# -- globals that are made again --------------------------------------------------------------

GlobalsSource = Callable[[dict[str, Any]], Iterable[str]]
_GLOBALS_SOURCES: list[GlobalsSource] = []


def remade_globals(source: GlobalsSource) -> None:
    """Declare globals that a library put in the program's namespaces and makes again itself
    (``torch.compile``'s compiled code and what it refers to): ``source(namespace)`` names them
    at each checkpoint, for each of the program's namespaces, and they do not travel."""
    _GLOBALS_SOURCES.append(source)


def transient_globals(namespaces: Iterable[dict[str, Any]]) -> dict[int, set[str]]:
    """The names :func:`remade_globals`' sources give now, by ``id`` of their namespace."""
    found: dict[int, set[str]] = {}
    if _GLOBALS_SOURCES:
        for namespace in namespaces:
            names = {name for source in _GLOBALS_SOURCES for name in source(namespace)}
            if names:
                found[id(namespace)] = names
    return found


# -- what is finished before a pause's state is read ------------------------------------------

#: Sources of what to finish before a pause (not a check or a periodic checkpoint) reads the
#: program's state: each returns the undo actions of what it finished.
_BEFORE_PAUSE: list[Callable[[], Iterable[Callable[[], object]]]] = []
_UNDO: list[Callable[[], object]] = []


def before_pause(source: Callable[[], Iterable[Callable[[], object]]]) -> None:
    """Declare what an object must finish before a pause reads the program's state and its
    working directory, for the process exits right after (its own ``atexit`` hook never runs):
    wandb's run finishes, so that its service writes what it buffered into the run's file,
    which travels. ``source()`` finishes it and returns how to undo that, should the pause not
    be taken after all (the program then runs on with the object live again)."""
    if source not in _BEFORE_PAUSE:
        _BEFORE_PAUSE.append(source)


def finish_before_pause() -> None:
    """Run the :func:`before_pause` sources (the engine, right before a pause's snapshot)."""
    for source in _BEFORE_PAUSE:
        _UNDO.extend(source())


def undo_before_pause(report: Callable[[str], object]) -> None:
    """The pause was not taken: undo what :func:`finish_before_pause` finished (an undo that
    fails is reported with ``report(message)``; the others still run)."""
    while _UNDO:
        undo = _UNDO.pop()
        try:
            undo()
        except Exception as exc:  # the program runs on: say what did not come back
            report(
                f"{_name(undo)} failed after a pause that was not taken: "
                f"{type(exc).__name__}: {exc}"
            )
