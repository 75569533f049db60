"""One pickler for a whole checkpoint: cloudpickle, adjusted so a program's state survives intact.

Stock cloudpickle is close, but a resumed program needs four things it does not do:

- a user namespace (``__main__`` or a module of the script's directory) is pickled *by name* and
  its contents once, separately: every function rebuilt in the new process then shares the new
  module's ``__dict__``, as ``global`` statements and later definitions expect;
- cells keep their identity (cloudpickle copies a closure's contents into new cells, which breaks
  two closures sharing a variable, or a frame sharing it with a closure);
- code objects keep their real ``co_filename`` (cloudpickle rewrites it), so tracebacks point at
  the script and a resumed program can be checkpointed again;
- ``sys.stdin/stdout/stderr`` travel by reference: a stream is the process's own.

Buffers that offer themselves out of band (numpy arrays, protocol 5) stay out of the pickle;
plugins' reducers do the same for other array types. It applies reducers registered by plugins
(keyed by type *name*, so registering costs no import), and refuses process-bound objects (a
running thread, a child process) with a clear message rather than pickling their innards.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import importlib
import io
import marshal
import pickle
import subprocess
import sys
import threading
import types
from collections import ChainMap
from collections.abc import Callable, Iterable, Mapping
from typing import IO, Any

import cloudpickle

from portal.capture import (
    _rebuild,
    caches,
    deepgraph,
    generators,
    libraries,
    progressive,
    rawstate,
    remade,
    threads,
)
from portal.capture.restoring import PortalMethod, portal_key
from portal.capture.staged import Buffer, staged_in

__all__ = [
    "CheckpointPickler",
    "NamespaceRef",
    "Reducer",
    "dumps",
    "resolve_reducers",
    "std_stream_ref",
]

Reducer = Callable[[Any], Any]

_STD_STREAMS = ("stdout", "stderr", "stdin", "__stdout__", "__stderr__", "__stdin__")
_PROCESS_BOUND: tuple[type, ...] = (threading.Thread, subprocess.Popen)
#: Library objects a diagnosis names whole rather than by their insides: a ``threading.Event``
#: is one problem ("ev"), not its condition's lock and each of the lock's bound methods.
_OPAQUE_MODULES = frozenset(
    {"threading", "queue", "socket", "selectors", "multiprocessing.synchronize", "asyncio.locks"}
)
#: cloudpickle's makers of a class pickled by value (before its attributes are set).
_CLASS_SKELETONS = (
    cloudpickle.cloudpickle._make_skeleton_class,
    cloudpickle.cloudpickle._make_skeleton_enum,
)
#: Modules of Portal's objects that live in a job's process (the engine, the control channel).
_PORTAL_LIVE_MODULES = ("portal.capture.engine", "portal.runtime.")
_DEFAULT = object()  # handler result: let pickle's defaults (or cloudpickle) decide


def _with_slots(cls: type, reduced: tuple[Any, ...]) -> tuple[Any, ...]:
    """cloudpickle makes a class's skeleton without its ``__slots__`` (its member descriptors
    are left out of the class state, to be made by ``type()``, but the skeleton is made
    without them): the rebuilt class's instances would get a ``__dict__`` instead, and pickling
    that class again fails (``KeyError`` for a ``__slots__`` given as one string). Its
    ``__slots__`` go into the skeleton's namespace, so ``type()`` makes the same slots.

    Only for non-empty slots of classes made by ``type`` or ``ABCMeta`` from plain bases: other
    metaclasses may refuse a ``__slots__`` in the namespace (``typing.NamedTuple``'s does), and
    empty slots make no descriptor to lose."""
    slots = cls.__dict__.get("__slots__")
    if (
        not slots
        or reduced[0] is not cloudpickle.cloudpickle._make_skeleton_class
        or type(cls) not in (type, abc.ABCMeta)
        or "__orig_bases__" in cls.__dict__
    ):
        return reduced
    make, args, *rest = reduced
    type_constructor, name, bases, type_kwargs, *more = args
    type_kwargs = {**type_kwargs, "__slots__": slots}
    return (make, (type_constructor, name, bases, type_kwargs, *more), *rest)


def resolve_reducers(reducers: Mapping[str, Reducer]) -> dict[Any, Reducer]:
    """Types for the registered names whose modules the program has already imported.

    A name whose module is not loaded cannot have instances in the program: skip it, at no cost.
    A name may also be a generator *function* (``"tqdm.std.tqdm.__iter__"``): generators have no
    type of their own to key on, so the reducer is keyed by the function's code and receives the
    suspended generators that code made (a ``for`` loop over ``tqdm(...)`` holds one).
    """
    resolved: dict[Any, Reducer] = {}  # keys: types, and code objects of generator functions
    for name, reducer in reducers.items():
        parts = name.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            module = sys.modules.get(".".join(parts[:cut]))
            if module is None:
                continue
            obj: Any = module
            for attr in parts[cut:]:
                obj = getattr(obj, attr, None)
            if isinstance(obj, type):
                resolved[obj] = reducer
            elif isinstance(obj, types.FunctionType):
                resolved[obj.__code__] = reducer
            break
    return resolved


class CheckpointPickler(cloudpickle.Pickler):  # type: ignore[misc]
    """The checkpoint's pickler (protocol 5).

    :param namespaces: ``id(module.__dict__) -> module name`` for the user namespaces pickled by
        name (their contents are pickled by the caller, once).
    :param reducers: plugin reducers by type (see :func:`resolve_reducers`); they win over ours.
    :param deep: defer plain instances' builds to the top level of the pickle, for a graph too
        deep to pickle by recursion (see :mod:`portal.capture.deepgraph`); dump
        ``deepgraph.DeferredBuilds.wrap(obj)`` then.
    :param places: the user namespaces' globals that load progressively, by identity
        (:func:`portal.capture.progressive.global_places`); a checkpoint passes them, a probe
        of one value need not.
    """

    def __init__(
        self,
        file: IO[bytes],
        *,
        namespaces: Mapping[int, str],
        reducers: Mapping[type, Reducer] | None = None,
        buffer_callback: Callable[[pickle.PickleBuffer], Any] | None = None,
        deep: bool = False,
        places: progressive.GlobalPlaces | None = None,
    ) -> None:
        # cloudpickle's table is a ChainMap (its reducers, then copyreg's), which the C pickler
        # looks up through Python for every object without a reducer_override answer: a plain
        # dict of the same entries, taken now (copyreg's registrations so far included), makes
        # that lookup a C one (the checkpoint check walks millions of objects). Set before the
        # C initialiser, which reads the attribute once.
        self.dispatch_table = dict(cloudpickle.Pickler.dispatch_table)
        super().__init__(file, protocol=5, buffer_callback=buffer_callback)
        self._namespaces = namespaces
        self._user_modules = frozenset(namespaces.values())
        self._plugin_reducers: dict[Any, Reducer] = dict(reducers or {})
        # Generator functions' reducers by the identity of their code: a code object hashes
        # and compares by its constants, and a generator rebuilt at resume keeps its saved
        # locals there (a list is unhashable; an array's ``==`` is no answer).
        self._generator_reducers: dict[int, tuple[types.CodeType, Reducer]] = {
            id(key): (key, reducer)
            for key, reducer in self._plugin_reducers.items()
            if isinstance(key, types.CodeType)
        }
        self._handlers: dict[type, Callable[[Any], Any] | None] = {}
        self._namespace_refs: dict[str, NamespaceRef] = {}
        # A graph too deep for the plain pickle: plain instances' builds deferred (deepgraph).
        self._deep = deepgraph.DeferredBuilds(self.dispatch_table) if deep else None
        self._places = places or progressive.GlobalPlaces()
        #: Library namespaces by ``id`` (made at the first library generator met).
        self._libraries: dict[int, str] | None = None
        #: The library code objects carried (generators'), each with its module's name.
        self.library_code: list[tuple[types.CodeType, str]] = []

    # -- dispatch ---------------------------------------------------------------------------

    def reducer_override(self, obj: Any) -> Any:
        t = type(obj)
        try:
            handler = self._handlers[t]
        except KeyError:
            handler = self._handlers[t] = self._handler_for(t)
        if handler is None:
            return NotImplemented if self._deep is None else self._deep.reduce(obj)
        result = handler(obj)
        if result is _DEFAULT:
            return super().reducer_override(obj)
        return result

    def _handler_for(self, t: type) -> Callable[[Any], Any] | None:
        handler = self._own_handler_for(t)
        shared = _shared_dict_names(t, self._user_modules)
        if shared:
            handler = functools.partial(self._reduce_maybe_shared, shared, handler)
        if t in remade.registered_types():
            handler = functools.partial(self._reduce_maybe_registered, handler)
        return handler

    def _reduce_maybe_registered(self, handler: Callable[[Any], Any] | None, obj: object) -> Any:
        """An object the program registered with ``portal.runtime.remake`` travels as its
        recipe (:mod:`portal.capture.remade`); any other instance as its type goes."""
        recipe = remade.recipe_of(obj)
        if recipe is not None:
            return recipe.reduce(obj)
        if handler is not None:
            return handler(obj)
        return NotImplemented if self._deep is None else self._deep.reduce(obj)

    def _reduce_maybe_shared(
        self,
        names: tuple[str, ...],
        handler: Callable[[Any], Any] | None,
        obj: object,
    ) -> Any:
        """An instance whose ``__dict__`` is a dict its class holds (a "Borg": accelerate's
        ``PartialState``, ``AcceleratorState``, ``GradientState``): it comes back sharing the
        new process's class dict, which gets the carried contents, so every instance still
        shares one state and the class sees it too. Any other instance: as its type goes."""
        own = getattr(obj, "__dict__", None)
        if own is not None:
            cls = type(obj)
            for name in names:
                if getattr(cls, name, None) is own:
                    return (
                        _rebuild.shared_dict_instance,
                        (cls, name),
                        own,
                        None,
                        None,
                        _rebuild.set_shared_dict_state,
                    )
        if handler is not None:
            return handler(obj)
        return NotImplemented if self._deep is None else self._deep.reduce(obj)

    def _own_handler_for(self, t: type) -> Callable[[Any], Any] | None:
        for base in t.__mro__:
            if base in self._plugin_reducers:
                plugin = self._plugin_reducers[base]
                rest = self._state_handler_for(t)
                if rest is None:
                    return plugin
                return functools.partial(_plugin_then, plugin, rest)
        return self._builtin_handler_for(t)

    def _state_handler_for(self, t: type) -> Callable[[Any], Any] | None:
        """How the pickler itself carries an instance of ``t`` that a plugin reducer declines:
        a user class's raw state, a global of a user module that loads progressively; None
        where pickle's own reduce is what the plugin left it to (an open ``BytesIO``)."""
        if t not in self.dispatch_table and rawstate.raw_eligible(t, self._user_modules):
            return self._reduce_raw
        if t in self._places.types:
            return self._maybe_global
        return None

    def _builtin_handler_for(self, t: type) -> Callable[[Any], Any] | None:
        """The pickler's own handling of ``t``, where no plugin reducer takes an object."""
        if t is types.GeneratorType:
            return self._reduce_generator
        if t is types.CellType:
            return _reduce_cell
        if t is types.FunctionType:
            return self._reduce_function
        if t is types.MethodType:
            return _reduce_method
        if issubclass(t, type):
            return self._reduce_class  # cloudpickle's (by value for user classes)
        if issubclass(t, types.ModuleType):  # module subclasses too (torch.ops is one)
            return self._reduce_module
        if t is types.CodeType:
            return _reduce_code
        if t is functools._lru_cache_wrapper:
            return self._reduce_lru_cache
        if issubclass(t, threading.Thread):
            return _reduce_thread
        if issubclass(t, _PROCESS_BOUND):
            return _refuse_process_bound
        if issubclass(t, io.IOBase):
            return _reduce_stream
        return self._state_handler_for(t)

    # -- reducers that need the pickler's state ---------------------------------------------

    def namespace_ref(self, name: str) -> NamespaceRef:
        """One reference object per namespace, so the pickle memoizes it."""
        ref = self._namespace_refs.get(name)
        if ref is None:
            ref = self._namespace_refs[name] = NamespaceRef(name)
        return ref

    def _reduce_generator(self, gen: types.GeneratorType[Any, Any, Any]) -> Any:
        code = gen.gi_code
        found = self._generator_reducers.get(id(code))
        if found is not None and found[0] is code:
            return found[1](gen)
        # Generators travel as frames: the user's in its namespace, a library's in the
        # library's module, named in the checkpoint's header (portal.capture.libraries).
        frame = gen.gi_frame
        if frame is None or id(frame.f_globals) in self._namespaces:
            return generators.reduce_generator(gen, self._namespaces, self.namespace_ref)
        if self._libraries is None:
            self._libraries = libraries.library_namespaces(self._namespaces)
        reduced = generators.reduce_generator(
            gen, ChainMap(dict(self._namespaces), self._libraries), self.namespace_ref
        )
        name = self._libraries.get(id(frame.f_globals))
        if name is not None:
            original = generators.original_code(gen)
            self.library_code.append((original, name))
        return reduced

    def _reduce_raw(self, obj: object) -> Any:
        """An instance of the program's own class with a ``__reduce__`` of its own: as raw
        state (portal.capture.rawstate), unless that state cannot travel. Decided on the class's
        first instance; its later ones go straight to the answer."""
        t = type(obj)
        if not rawstate.raw_state_travels(t, obj, self._error_of):
            # pickle's default (the class's own reduce), or a global's progressive load
            self._handlers[t] = self._maybe_global if t in self._places.types else None
            return self.reducer_override(obj)
        raw = rawstate.raw_reducer(t)
        if t not in self._places.types:
            self._handlers[t] = raw
            return raw(obj)
        places = self._places.by_id

        def reduce_raw(obj: object) -> Any:
            return self._reduce_global(obj, raw(obj)) if id(obj) in places else raw(obj)

        self._handlers[t] = reduce_raw
        return reduce_raw(obj)

    def _maybe_global(self, obj: object) -> Any:
        """An object of a type some global of a user module has: that global itself loads
        progressively; any other object of the type as pickle would load it."""
        if id(obj) in self._places.by_id:
            return self._reduce_global(obj, self._default_reduce(obj))
        return NotImplemented if self._deep is None else self._deep.reduce(obj)

    def _default_reduce(self, obj: object) -> Any:
        """What pickle itself would do with ``obj``: copyreg's table, else its
        ``__reduce_ex__``."""
        reduce = self.dispatch_table.get(type(obj))
        return reduce(obj) if reduce is not None else obj.__reduce_ex__(5)

    def _reduce_global(self, obj: object, reduced: Any) -> Any:
        """A global of a user module that is an instance: made and set as its globals at once,
        its state set one attribute at a time (portal.capture.progressive)."""
        if not isinstance(reduced, tuple):
            return reduced  # a name: pickled by reference
        found = self._places.by_id[id(obj)]
        places = [(self.namespace_ref(module), name) for module, name in found]
        return progressive.progressive(obj, reduced, places)

    def _error_of(self, value: object) -> BaseException | None:
        error = pickle_error(value, namespaces=self._namespaces, reducers=self._plugin_reducers)
        from portal.core.specs import WaitForSafePoint

        if isinstance(error, WaitForSafePoint):
            raise error  # carried a few lines later: nothing decided
        return error

    def _reduce_class(self, cls: type) -> Any:
        reduced = super().reducer_override(cls)
        if not isinstance(reduced, tuple) or reduced[0] not in _CLASS_SKELETONS:
            return reduced  # by reference
        reduced = _with_slots(cls, reduced)
        home = getattr(cls, "__module__", None)
        module = sys.modules.get(home) if isinstance(home, str) else None
        name = None if module is None else self._namespaces.get(id(module.__dict__))
        if name is None or module.__dict__.get(cls.__name__) is not cls:
            return reduced  # no global of a user module (a class made in a function, say)
        # Set in its module as soon as it is made (portal.capture.namespaces): a value loaded
        # before its module's turn may run code that names it.
        make, args, *rest = reduced
        return (
            _rebuild.class_in_namespace,
            (make, args, self.namespace_ref(name), cls.__name__),
            *rest,
        )

    def _reduce_module(self, obj: types.ModuleType) -> Any:
        if obj.__name__ in self._user_modules and sys.modules.get(obj.__name__) is obj:
            return (_rebuild.user_module, (obj.__name__,))
        if type(obj) is not types.ModuleType and sys.modules.get(obj.__name__) is obj:
            # cloudpickle knows plain modules only; an imported subclass is one by name too.
            return (importlib.import_module, (obj.__name__,))
        return NotImplemented  # installed module: by reference ("imports run again")

    def _reduce_lru_cache(self, wrapper: Any) -> Any:
        wrapped = caches.cached_function(wrapper)
        own = isinstance(wrapped, types.FunctionType) and id(wrapped.__globals__) in (
            self._namespaces
        )
        if not own and caches.importable_as_itself(wrapper, self._user_modules):
            return NotImplemented  # a library's cached function: by reference
        # Any other wrapper is rebuilt around what it wraps (the program's function, a builtin,
        # a bound method of a carried object), which travels as any value does.
        # Carried with its contents, LRU order and statistics (portal.capture.caches); contents
        # that cannot travel (a cached connection, say) leave it empty, as a new process would.
        params = wrapper.cache_parameters()
        state = caches.lru_cache_state(wrapper)
        if state["entries"]:
            error = pickle_error(
                state["entries"], namespaces=self._namespaces, reducers=self._plugin_reducers
            )
            if error is not None:
                from portal.core.specs import WaitForSafePoint

                if isinstance(error, WaitForSafePoint):
                    raise error  # carried a few lines later
                state = caches.without_contents(state, f"{type(error).__name__}: {error}")
        return (
            caches.rebuild_lru_cache,
            (wrapped, params["maxsize"], params["typed"]),
            state,
            None,
            None,
            caches.restore_lru_cache,
        )

    def _reduce_function(self, func: types.FunctionType) -> Any:
        namespace = self._namespaces.get(id(func.__globals__))
        if namespace is None:
            return _DEFAULT  # library function: cloudpickle (by reference when importable)
        state: dict[str, Any] = {
            "__qualname__": func.__qualname__,
            "__module__": func.__module__,
            "__defaults__": func.__defaults__,
            "__kwdefaults__": func.__kwdefaults__,
            "__annotations__": func.__annotations__,
            "__doc__": func.__doc__,
        }
        if func.__dict__:
            state["__dict__"] = func.__dict__
        # The closure's cells go in the arguments: each is created empty and memoized before its
        # contents are pickled, so a cell holding this very function is no infinite recursion.
        return (
            _rebuild.make_function,
            (func.__code__, self.namespace_ref(namespace), func.__name__, func.__closure__),
            state,
            None,
            None,
            _rebuild.set_function_state,
        )


def _shared_dict_names(t: type, user_modules: frozenset[str]) -> tuple[str, ...]:
    """Names of the plain dicts a library class ``t`` (or a base) holds as class attributes:
    where an instance's ``__dict__`` may be one of them (see ``_reduce_maybe_shared``). A
    class pickled by value (the user's) carries its attributes itself."""
    if t.__module__ in user_modules or t.__module__ == "__main__" or issubclass(t, type):
        return ()
    names = []
    for base in t.__mro__[:-1]:
        for name, value in vars(base).items():
            if type(value) is dict and not name.startswith("__"):
                names.append(name)
    return tuple(dict.fromkeys(names))


def _reduce_method(method: types.MethodType) -> Any:
    """A bound method of one of Portal's live objects (a library's signal handler chained to
    Portal's, or one it saved): the same method of the new process's live object
    (:class:`~portal.capture.restoring.PortalMethod`); any other as cloudpickle pickles it."""
    owner = method.__self__
    if type(owner).__module__.startswith(_PORTAL_LIVE_MODULES):
        return (PortalMethod, (portal_key(owner), method.__func__.__name__))
    return _DEFAULT


def _reduce_cell(cell: types.CellType) -> Any:
    try:
        contents = cell.cell_contents
    except ValueError:  # empty cell
        return (_rebuild.make_cell, ())
    return (_rebuild.make_cell, (), (contents,), None, None, _rebuild.set_cell)


def _reduce_code(code: types.CodeType) -> Any:
    try:
        data = marshal.dumps(code)
    except ValueError as exc:
        raise TypeError(f"cannot pickle code object {code.co_qualname!r}: {exc}") from exc
    return (_rebuild.load_code, (data,))


class NamespaceRef:
    """Stands for a user namespace in the pickle: loads as that module's ``__dict__`` in the new
    process. (The C pickler never offers a plain ``dict`` to ``reducer_override``, so the
    namespace is swapped for this where the engine meets it: function globals, frame records.)"""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __reduce__(self) -> Any:
        return (_rebuild.module_namespace, (self.name,))


def _plugin_then(plugin: Callable[[Any], Any], rest: Callable[[Any], Any], obj: object) -> Any:
    """A plugin reducer that declines an object (``NotImplemented``: mpmath's reducers for a
    copy of mpmath among the program's files, torch's module reducer for a module not compiled)
    leaves it to the pickler's own state handling, as if the plugin had none: a user class's
    raw state, a module-level global that loads progressively (:meth:`_state_handler_for`)."""
    result = plugin(obj)
    return rest(obj) if result is NotImplemented else result


def _reduce_thread(thread: threading.Thread) -> Any:
    """The program's parked threads travel (:mod:`portal.capture.threads`); others are refused."""
    reduced = threads.reduce_thread(thread)
    return _refuse_process_bound(thread) if reduced is None else reduced


def _refuse_process_bound(obj: object) -> Any:
    raise TypeError(
        f"cannot pickle {type(obj).__name__!r} object (it is part of the process): make the "
        "object that owns it again at the resume, with portal.runtime.remake(obj, factory, "
        "*args) where obj is made"
    )


def std_stream_ref(obj: object) -> tuple[Callable[[str], Any], tuple[str]] | None:
    """How ``obj`` pickles when it is ``sys.stdout``, ``sys.stderr``, ``sys.stdin`` or one of
    their ``__std*__`` originals: by reference, as the resumed process's own stream (a stream is
    the process's own). None for any other object. Plugins that reduce streams (the built-in
    ``capture_files``) ask this first."""
    for name in _STD_STREAMS:
        if getattr(sys, name, None) is obj:
            return (_rebuild.std_stream, (name,))
    return None


def _reduce_stream(obj: object) -> Any:
    ref = std_stream_ref(obj)
    if ref is not None:
        return ref
    # Any other stream is the process's own (cloudpickle would read a file's contents into a
    # StringIO, which a program continuing to read or write it would not notice). The
    # ``capture_files`` plugin carries closed files and the working directory's open ones.
    t = type(obj)
    raise TypeError(f"cannot pickle '{t.__module__}.{t.__qualname__}' object")


class _NullSink:
    """A file that counts bytes and keeps none (for probing and diagnosis)."""

    def __init__(self) -> None:
        self.size = 0

    def write(self, data: bytes | memoryview) -> int:
        n = len(data)
        self.size += n
        return n


def dumps(
    obj: object,
    *,
    namespaces: Mapping[int, str],
    reducers: Mapping[type, Reducer] | None = None,
    keep: bool = True,
    places: progressive.GlobalPlaces | None = None,
    library_code: list[tuple[types.CodeType, str]] | None = None,
) -> tuple[bytes, list[Buffer], int]:
    """Pickle ``obj``; return the pickle (empty when ``keep`` is false), its out-of-band buffers
    and the checkpoint's size: the pickle's plus its buffers' (what a checkpoint of it would
    hold, which the checkpoint check reports and the placement policies measure).
    ``library_code`` receives the library code objects it carried (suspended generators')."""
    buffers: list[Buffer] = []
    buffered = 0

    def on_buffer(buf: pickle.PickleBuffer) -> bool:
        nonlocal buffered
        raw = buf.raw()
        staged = staged_in(raw)  # a GPU storage, say: its bytes are fetched while writing
        buffered += raw.nbytes if staged is None else staged.nbytes
        buffers.append((raw if staged is None else staged) if keep else memoryview(b""))
        return False  # out of band

    # A graph too deep for the plain pickle is pickled again with its builds deferred (see
    # portal.capture.deepgraph); the plain one stays first, so other checkpoints are unchanged.
    for deep in (False, True):
        sink: Any = io.BytesIO() if keep else _NullSink()
        buffers.clear()
        buffered = 0
        pickler = CheckpointPickler(
            sink,
            namespaces=namespaces,
            reducers=reducers,
            buffer_callback=on_buffer,
            deep=deep,
            places=places,
        )
        try:
            with deepgraph.pickling_depth():
                pickler.dump(deepgraph.DeferredBuilds.wrap(obj) if deep else obj)
            if library_code is not None:
                library_code.extend(pickler.library_code)
            break
        except Exception as exc:
            # The error's traceback holds this frame, and may outlive it in a reference cycle
            # (the caller diagnoses it): not the state's memory with it.
            buffers.clear()
            if deep or not deepgraph.too_deep(exc):
                raise
        finally:
            # The handler cache holds bound methods (a cycle through the pickler) and the memo
            # every object pickled: let both go now, not at some later garbage collection.
            pickler.clear_memo()
            pickler._handlers.clear()
    if keep:
        data = sink.getvalue()
        return data, buffers, len(data) + buffered
    return b"", buffers, sink.size + buffered


def pickle_error(
    obj: object,
    *,
    namespaces: Mapping[int, str],
    reducers: Mapping[type, Reducer] | None,
) -> BaseException | None:
    """The error pickling ``obj`` alone raises, or None."""
    try:
        dumps(obj, namespaces=namespaces, reducers=reducers, keep=False)
    except Exception as exc:
        return exc
    return None


def iter_children(value: object) -> Iterable[tuple[str, object]]:
    """Named parts of ``value`` a diagnosis descends into: ``[key]``, ``[i]``, ``.attr``."""
    if isinstance(value, (*_PROCESS_BOUND, io.IOBase)):
        return
    if type(value).__module__ in _OPAQUE_MODULES:
        return
    if isinstance(value, types.BuiltinMethodType):
        owner = value.__self__  # ``lock.acquire``: the problem is the lock, named once
        if owner is not None and not isinstance(owner, types.ModuleType):
            yield ".__self__", owner
        return
    if isinstance(value, dict):
        for key, item in list(value.items()):
            yield f"[{key!r}]", item
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield f"[{i}]", item
        return
    if isinstance(value, (set, frozenset)):
        for item in list(value):
            yield "{...}", item
        return
    if isinstance(value, types.CellType):
        with contextlib.suppress(ValueError):  # an empty cell has no part
            yield "", value.cell_contents
        return
    if isinstance(value, types.FunctionType):
        for name, cell in zip(value.__code__.co_freevars, value.__closure__ or (), strict=False):
            with contextlib.suppress(ValueError):
                yield f".<closure {name}>", cell.cell_contents
        return
    if isinstance(value, types.MethodType):
        yield ".__self__", value.__self__
        return
    attrs = getattr(value, "__dict__", None)
    if isinstance(attrs, dict):
        for key, item in list(attrs.items()):
            yield f".{key}", item
    for slot in getattr(type(value), "__slots__", ()):
        if (
            isinstance(slot, str)
            and hasattr(value, slot)
            and slot not in ("__dict__", "__weakref__")
        ):
            yield f".{slot}", getattr(value, slot)
