"""``bladekit.app(name)`` and what its decorators return: :class:`Function`, :class:`Cls`.

Decorating validates every setting at once (:class:`~bladekit.options.FunctionOptions`) and keeps
the user's function or class untouched inside the wrapper; calling ``.remote()``, ``.map()``,
``.starmap()`` or ``.spawn()`` starts runs (:class:`~bladekit.runner.Run`) with the same request,
so a map carries the function's settings without repeating them.

``with app.run():`` is Modal's ephemeral app: what is started inside the block is stopped when it
ends. Outside any block, calls work as well (each run ends with its call or its instance), so code
written before the block existed keeps working.

A run's handle is :func:`run_of` (``bladekit.run_of(instance).preempt(30)``): a free function,
so it can never hide a method of the user's class, whatever its name.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Generic, ParamSpec, TypeVar

from bladekit import hooks
from bladekit.options import FunctionOptions
from bladekit.protocol import ContainerSpec, reference
from bladekit.runner import Run
from bladekit.volumes import Volume
from bladekit.wire import FunctionRequest, encode_request
from portal.core.errors import InvalidArgumentError

__all__ = ["App", "Cls", "ClsInstance", "Function", "FunctionCall", "Method", "app", "run_of"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

#: Containers a ``.map()`` / ``.starmap()`` runs side by side at most.
MAP_CONCURRENCY = 4


def app(name: str) -> App:
    """A new app: the namespace a group of functions and classes runs under."""
    return App(name)


class App:
    """Holds an app's functions and classes; ``@app.function``, ``@app.cls``, ``@app.on_preempt``."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name.strip():
            raise InvalidArgumentError(
                f"app name {name!r} is not valid: give a non-empty string, e.g. "
                "bladekit.app('train-resnet')",
                details={"argument": "name", "value": repr(name)},
            )
        self.name = name
        self.registered: dict[str, Function[Any, Any] | Cls[Any]] = {}
        #: ``@app.local_entrypoint()`` functions, by name: what ``bladekit run FILE`` starts.
        self.entrypoints: dict[str, LocalEntrypoint[Any, Any]] = {}
        self._on_preempt: Callable[..., Any] | None = None
        self._session: list[Run] | None = None  # runs started inside ``with app.run():``
        self._session_lock = threading.Lock()

    @contextlib.contextmanager
    def run(self, *, detach: bool = False) -> Iterator[App]:
        """Run the app for the duration of the block, as Modal's ``with app.run():``.

        When the block ends (normally or by an exception) every run started inside it is
        stopped: idle instances are closed, and a call still in flight (a ``.spawn()`` not yet
        collected) is cut short and its ``.get()`` raises :class:`~bladekit.AppStoppedError`.
        With ``detach=True`` runs are left to finish on their own (they still end with this
        process). Calls made outside any block work as before.
        """
        with self._session_lock:
            if self._session is not None:
                raise InvalidArgumentError(
                    f"app {self.name!r} is already running (a `with app.run():` block is open): "
                    "run your calls inside that block instead of opening a second one",
                    details={"app": self.name},
                )
            self._session = []
        try:
            yield self
        finally:
            with self._session_lock:
                started, self._session = self._session or [], None
            if not detach:
                reason = (
                    f"app {self.name!r} stopped (its `with app.run():` block ended). Wait for "
                    "results inside the block (call.get()), or use app.run(detach=True)"
                )
                for run in started:
                    run.stop(reason)

    def track(self, run: Run) -> Run:
        """Count ``run`` as started by this app's open ``with app.run():`` block, if any."""
        with self._session_lock:
            if self._session is not None:
                self._session.append(run)
        return run

    def function(
        self,
        *,
        gpu: str | None = None,
        volumes: Mapping[str, Volume] | None = None,
        gpu_class: str = "spot",
        best_effort: bool = False,
        max_interruptions: int | None = None,
    ) -> Callable[[Callable[P, R]], Function[P, R]]:
        """Make a function run in its own container: ``f.remote()``, ``f.map()``, ``f.spawn()``."""
        options = FunctionOptions(
            gpu=gpu,
            volumes=volumes or {},
            gpu_class=gpu_class,
            best_effort=best_effort,
            max_interruptions=max_interruptions,
        )

        def wrap(fn: Callable[P, R]) -> Function[P, R]:
            if isinstance(fn, type) or not callable(fn):
                raise InvalidArgumentError(
                    f"@app.function() was given {fn!r}: put it above a def (use @app.cls() for "
                    "a class)",
                    details={"given": repr(fn)},
                )
            hooks.refuse_unless_plain(fn, "@app.function()")
            function = Function(self, fn, options)
            self.registered[function.name] = function
            return function

        return wrap

    def cls(
        self,
        *,
        gpu: str | None = None,
        volumes: Mapping[str, Volume] | None = None,
        gpu_class: str = "spot",
        best_effort: bool = False,
        max_interruptions: int | None = None,
    ) -> Callable[[type[T]], Cls[T]]:
        """Make a class run in its own container; ``Cls()`` gives a handle whose methods
        (marked ``@app.method()``) are called with ``.remote()`` and friends."""
        options = FunctionOptions(
            gpu=gpu,
            volumes=volumes or {},
            gpu_class=gpu_class,
            best_effort=best_effort,
            max_interruptions=max_interruptions,
        )

        def wrap(klass: type[T]) -> Cls[T]:
            if not isinstance(klass, type):
                raise InvalidArgumentError(
                    f"@app.cls() was given {klass!r}, which is not a class (use @app.function() "
                    "for a function)",
                    details={"given": repr(klass)},
                )
            wrapped = Cls(self, klass, options)
            self.registered[wrapped.name] = wrapped
            return wrapped

        return wrap

    def local_entrypoint(self) -> Callable[[Callable[P, R]], LocalEntrypoint[P, R]]:
        """``@app.local_entrypoint()``: a function that runs here, on the caller's machine, as
        Modal's does. ``bladekit run FILE`` (or ``FILE::NAME``) calls it inside ``with
        app.run():`` with the command line's words as its arguments (by its signature, as for an
        app function), so it can start remote calls, print, and write local files; calling it
        from Python just calls it. An ``async def`` one is run with :func:`asyncio.run`."""

        def wrap(fn: Callable[P, R]) -> LocalEntrypoint[P, R]:
            if isinstance(fn, type) or not callable(fn):
                raise InvalidArgumentError(
                    f"@app.local_entrypoint() was given {fn!r}: put it above a def",
                    details={"given": repr(fn)},
                )
            entry = LocalEntrypoint(self, fn)
            self.entrypoints[entry.name] = entry
            return entry

        return wrap

    def on_preempt(self, fn: F) -> F:
        """``@bladekit.on_preempt``, registered with this app (one free callback per app)."""
        hooks.on_preempt(fn)
        if not hooks.is_method_definition(fn):
            current = self._on_preempt
            if current is not None and current.__qualname__ != fn.__qualname__:
                raise InvalidArgumentError(
                    f"app {self.name!r} already has an on_preempt callback ({current.__qualname__}); "
                    f"{fn.__qualname__} would be a second one. An app runs a single callback: "
                    "call both from one function instead",
                    details={"app": self.name, "existing": current.__qualname__},
                )
            self._on_preempt = fn
        return fn

    @staticmethod
    def method() -> Callable[[F], F]:
        """Mark a method of an ``@app.cls`` class as callable remotely."""
        return hooks.method()

    @staticmethod
    def enter() -> Callable[[F], F]:
        """Same as ``@bladekit.enter()``."""
        return hooks.enter()

    def free_on_preempt(self, namespace: Mapping[str, Any]) -> Callable[..., Any] | None:
        """The free callback for a function whose module namespace is ``namespace``."""
        found = hooks.find_module_on_preempt(namespace)
        registered = self._on_preempt
        if registered is not None and found is not None and found is not registered:
            raise InvalidArgumentError(
                f"app {self.name!r} has two on_preempt callbacks ({registered.__qualname__} and "
                f"{found.__qualname__}); an app runs a single one",
                details={"app": self.name},
            )
        return registered or found

    def __repr__(self) -> str:
        return f"bladekit.app({self.name!r})"


class LocalEntrypoint(Generic[P, R]):
    """A function of the app that runs on the caller's machine (``@app.local_entrypoint()``)."""

    def __init__(self, app: App, fn: Callable[P, R]) -> None:
        self.app = app
        self.raw = fn
        self.name = fn.__qualname__
        functools.update_wrapper(self, fn)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        if inspect.iscoroutinefunction(self.raw):
            import asyncio

            return asyncio.run(self.raw(*args, **kwargs))  # type: ignore[no-any-return]
        return self.raw(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<bladekit local entrypoint {self.app.name}.{self.name}>"


class Function(Generic[P, R]):
    """A function that runs in its own container."""

    def __init__(self, app: App, fn: Callable[P, R], options: FunctionOptions) -> None:
        self.app = app
        self.raw = fn
        self.options = options
        self.name: str = getattr(fn, "__qualname__", repr(fn))
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def request(self) -> FunctionRequest:
        """What a run of this function asks of the control plane."""
        return self.options.request(app=self.app.name, function=self.name)

    def request_body(self) -> bytes:
        """The request's exact bytes."""
        return encode_request(self.request())

    def new_run(self) -> Run:
        """A run of this function (no container until its first call)."""
        callback = self.app.free_on_preempt(getattr(self.raw, "__globals__", {}))
        spec = ContainerSpec(
            kind="function",
            target=reference(self.raw, self),
            name=self.name,
            on_preempt=callback,
            volumes=dict(self.options.volumes),
            preemptible=self.options.preemptible,
        )
        return self.app.track(Run(spec, self.request()))

    def local(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the function in this process (no container, no preemption)."""
        return self.raw(*args, **kwargs)

    __call__ = local

    def remote(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the function in a new container and wait for its result."""
        run = self.new_run()
        try:
            result: R = run.call(None, args, kwargs)
            return result
        finally:
            run.close()

    def spawn(self, *args: P.args, **kwargs: P.kwargs) -> FunctionCall[R]:
        """Start the function in a new container without waiting; ``.get()`` waits."""
        run = self.new_run()
        return FunctionCall(run, None, args, kwargs, close_after=True)

    def map(self, *iterables: Iterable[Any]) -> Iterator[R]:
        """``fn(*args)`` for each tuple of ``zip(*iterables)``, in order, in up to
        :data:`MAP_CONCURRENCY` containers that all carry this function's settings."""
        return _map_runs(self.new_run, None, list(zip(*iterables, strict=False)))

    def starmap(self, inputs: Iterable[Iterable[Any]]) -> Iterator[R]:
        """``fn(*args)`` for each ``args`` of ``inputs``, like :meth:`map`."""
        return _map_runs(self.new_run, None, [tuple(args) for args in inputs])

    def __repr__(self) -> str:
        return f"<bladekit function {self.app.name}.{self.name}>"


class Cls(Generic[T]):
    """A class whose instances live in their own container; call it for a :class:`ClsInstance`."""

    def __init__(self, app: App, klass: type[T], options: FunctionOptions) -> None:
        self.app = app
        self.raw = klass
        self.options = options
        self.name = klass.__qualname__
        self.enter, self.on_preempt, self.methods = hooks.find_class_hooks(klass)
        self.__doc__ = klass.__doc__

    def request(self) -> FunctionRequest:
        return self.options.request(app=self.app.name, function=self.name)

    def request_body(self) -> bytes:
        return encode_request(self.request())

    def new_run(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Run:
        spec = ContainerSpec(
            kind="cls",
            target=reference(self.raw, self),
            name=self.name,
            enter=tuple(self.enter),
            on_preempt=self.on_preempt,
            init_args=args,
            init_kwargs=kwargs,
            volumes=dict(self.options.volumes),
            preemptible=self.options.preemptible,
        )
        return self.app.track(Run(spec, self.request()))

    def __call__(self, *args: Any, **kwargs: Any) -> ClsInstance[T]:
        return ClsInstance(self, args, kwargs)

    def __repr__(self) -> str:
        return f"<bladekit class {self.app.name}.{self.name}>"


#: ClsInstance's own names that a user's remote method of the same name takes precedence over.
_YIELDING_NAMES = frozenset({"run", "close"})


class ClsInstance(Generic[T]):
    """A handle on one instance living in its container (started at the first call).

    The container, and the instance's state, last across calls until :meth:`close` (or the
    handle is garbage-collected, or the interpreter exits, or the ``with app.run():`` block it
    was first called in ends); preemptions in between start new attempts that run the ``enter``
    hooks again. Its run is ``bladekit.run_of(instance)``. Every remote method of the user's
    class is reachable as ``instance.name``, including ``run`` and ``close``: those two names
    are the user's when the class defines them (``close`` the instance then with
    ``with Cls() as instance:`` or ``bladekit.run_of(instance).close()``).
    """

    def __init__(self, cls: Cls[T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._cls = cls
        self._args = args
        self._kwargs = kwargs
        self._run: Run | None = None
        self._lock = threading.Lock()
        self._finalizer: weakref.finalize[Any, Any] | None = None

    def _ensure_run(self) -> Run:
        """This instance's run, created (without a container yet) on first use."""
        with self._lock:
            if self._run is None:
                self._run = self._cls.new_run(self._args, self._kwargs)
                self._finalizer = weakref.finalize(self, self._run.close)
            return self._run

    def __getattribute__(self, name: str) -> Any:
        # The user's class wins for the few names this handle also defines (``run``, ``close``).
        if name in _YIELDING_NAMES:
            cls: Cls[Any] = object.__getattribute__(self, "_cls")
            if name in cls.methods:
                return Method(self, name)
            if name == "run" and hasattr(cls.raw, "run"):
                return object.__getattribute__(self, "__getattr__")(name)
        return object.__getattribute__(self, name)

    @property
    def run(self) -> Run:
        """Deprecated: ``bladekit.run_of(instance)``. Kept for code written before the rename;
        a class with its own ``run`` gets its own (see :meth:`__getattribute__`)."""
        warnings.warn(
            "instance.run is deprecated and hides a method named run: use "
            "bladekit.run_of(instance) for the run handle",
            DeprecationWarning,
            stacklevel=2,
        )
        return self._ensure_run()

    def __getattr__(self, name: str) -> Method[Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._cls.methods:
            available = ", ".join(sorted(self._cls.methods)) or "none"
            raise AttributeError(
                f"{self._cls.name} has no remote method {name!r} (methods marked @app.method(): "
                f"{available}). Mark it with @app.method() to call it remotely"
            )
        return Method(self, name)

    def close(self) -> None:
        """Stop the container after its current call (the instance's state goes with it)."""
        self._close()

    def _close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()

    def __enter__(self) -> ClsInstance[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()  # not self.close: that may be the user's remote method


class Method(Generic[R]):
    """``instance.name``: a remote method of a :class:`ClsInstance`."""

    def __init__(self, instance: ClsInstance[Any], name: str) -> None:
        self._instance = instance
        self.name = name

    def remote(self, *args: Any, **kwargs: Any) -> R:
        """Call the method in the instance's container and wait for its result."""
        result: R = self._instance._ensure_run().call(self.name, args, kwargs)
        return result

    def spawn(self, *args: Any, **kwargs: Any) -> FunctionCall[R]:
        """Start the method in the instance's container without waiting; ``.get()`` waits."""
        return FunctionCall(
            self._instance._ensure_run(), self.name, args, kwargs, close_after=False
        )

    def _fresh_run(self) -> Run:
        inst = self._instance
        return inst._cls.new_run(inst._args, inst._kwargs)

    def map(self, *iterables: Iterable[Any]) -> Iterator[R]:
        """The method over ``zip(*iterables)`` in fresh instances (same constructor arguments)."""
        return _map_runs(self._fresh_run, self.name, list(zip(*iterables, strict=False)))

    def starmap(self, inputs: Iterable[Iterable[Any]]) -> Iterator[R]:
        return _map_runs(self._fresh_run, self.name, [tuple(args) for args in inputs])


class FunctionCall(Generic[R]):
    """A call started by ``.spawn()``; its run (``bladekit.run_of(call)``, also ``call.run``)
    lets a caller (or a test) preempt it."""

    def __init__(
        self,
        run: Run,
        method: str | None,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        close_after: bool,
    ) -> None:
        self.run = run
        self._future: Future[R] = Future()
        self._close_after = close_after
        threading.Thread(
            target=self._work,
            args=(method, args, kwargs),
            name=f"bladekit-call-{run.run_id}",
            daemon=True,
        ).start()

    def _work(self, method: str | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        # The run is closed (and its record written) before the outcome is published, so
        # whoever ``.get()``s it sees the run's final state, as a ``.remote()`` caller does.
        try:
            try:
                value = self.run.call(method, args, kwargs)
            finally:
                if self._close_after:
                    self.run.close()
        except BaseException as exc:
            self._future.set_exception(exc)
        else:
            self._future.set_result(value)

    def get(self, timeout: float | None = None) -> R:
        """The result (or the call's exception), waiting up to ``timeout`` seconds.

        Raises :class:`TimeoutError` when it is not done by then; the call goes on running.
        """
        try:
            return self._future.result(timeout)
        except TimeoutError:
            if self._future.done():  # the call's own TimeoutError: its outcome, as it is
                raise
            raise TimeoutError(
                f"run {self.run.run_id} of {self.run.name} did not finish within {timeout:g} s: "
                "it goes on running; call .get() again to wait longer (or without a timeout)"
            ) from None

    def done(self) -> bool:
        return self._future.done()


def _map_runs(
    new_run: Callable[[], Run], method: str | None, inputs: list[tuple[Any, ...]]
) -> Iterator[Any]:
    """Results of ``inputs`` in order; each worker thread keeps one run (container) for its share."""
    runs: list[Run] = []
    lock = threading.Lock()
    local = threading.local()

    def work(args: tuple[Any, ...]) -> Any:
        run: Run | None = getattr(local, "run", None)
        if run is None:
            run = new_run()
            local.run = run
            with lock:
                runs.append(run)
        return run.call(method, args, {})

    def results() -> Iterator[Any]:
        if not inputs:
            return
        pool = ThreadPoolExecutor(min(MAP_CONCURRENCY, len(inputs)), "bladekit-map")
        try:
            yield from pool.map(work, inputs)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            for run in runs:
                run.close()

    return results()


def run_of(handle: ClsInstance[Any] | FunctionCall[Any]) -> Run:
    """The run behind an instance or a spawned call: ``run_of(t).preempt(seconds=30)``,
    ``.events``, ``.run_id``, ``.attempt``, ``.interruptions``.

    A function rather than an attribute, so that it never hides a method of the user's class.
    An instance's run is created on first use (its container starts at its first call).
    """
    if isinstance(handle, ClsInstance):
        return handle._ensure_run()
    if isinstance(handle, FunctionCall):
        return handle.run
    raise InvalidArgumentError(
        f"bladekit.run_of() was given {type(handle).__name__}: give an instance of an @app.cls "
        "class (Trainer()) or a call from .spawn()",
        details={"given": type(handle).__name__},
    )
