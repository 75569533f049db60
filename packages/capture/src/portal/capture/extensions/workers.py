"""Objects that own worker threads or processes, re-made at the resume with the arguments that
made them (:mod:`portal.capture.remade`): the standard library's, which most training scripts
hold one of.

* ``threading.Condition`` (and so ``queue.Queue``, ``Event``, ``Semaphore`` built on one)
  travels with its lock but without its waiters, when each waiter (another thread blocked in
  ``wait()``: a worker in ``queue.get()``) is a thread made again with its owner
  (:func:`portal.capture.remade.thread_is_remade`), or a thread of the program's carried in
  its wait (:mod:`portal.capture.threads`): it waits on the new condition afresh. A
  thread that is not made again is named, with the way out (``portal.runtime.remake``): it
  would be lost. The lock itself goes by ``capture_locks``: one held at the pause still defers
  it. A queue travels with the items it holds.
* ``logging.handlers.QueueListener``: stopped at the pause (every record put on its queue so far
  is handled: in a file of the working directory, it travels) and started again at once, so a
  periodic checkpoint leaves it running; made again with its queue and handlers, and started
  if it was running.
* ``concurrent.futures.ThreadPoolExecutor``, when idle: made again with its maximum workers,
  thread name prefix, initializer and its arguments. With work queued or running, the pause waits
  for it to finish (a few lines later); a ``Future`` not yet done does the same, one done
  travels with its result. A pool shut down is made again and shut down.
* ``multiprocessing.Pool`` and ``multiprocessing.pool.ThreadPool``, when idle: made again with
  their processes, initializer and its arguments, maximum tasks per child and start method; a
  task in flight (an ``apply_async``, an ``imap`` being consumed) makes the pause wait for the
  pool's work to finish; results already in travel with them. A closed or terminated pool is
  refused, named, with the way out.

The rebuild functions' names are part of the checkpoint format: rename none of them.
"""

from __future__ import annotations

import sys
from typing import Any

from portal.capture.remade import remade, remakes_threads, thread_is_remade
from portal.capture.threads import is_carried
from portal.core.specs import SerializerSpec, WaitForSafePoint

__all__ = ["rebuild_condition", "rebuild_executor", "serializer_specs"]


def _refuse(obj: object, reason: str) -> TypeError:
    t = type(obj)
    return TypeError(f"cannot pickle '{t.__module__}.{t.__qualname__}' object: {reason}")


# -- conditions -------------------------------------------------------------------------------


def _reduce_condition(cond: Any) -> Any:
    threading = sys.modules["threading"]
    if type(cond) is not threading.Condition:
        return NotImplemented  # a subclass: its own state, pickled as it goes
    if cond._waiters:
        waiting = _threads_waiting_on(cond)
        if len(waiting) < len(cond._waiters):
            raise WaitForSafePoint("a thread is waking from a wait: the pause waits for it")
        for thread in waiting:
            if not thread_is_remade(thread) and not is_carried(thread):
                raise _refuse(
                    cond,
                    f"thread {thread.name!r} waits on it, and that thread does not travel (its "
                    "work would be lost; a thread travels when a function of the program's "
                    "waits in a queue's get or put, an event's wait, a semaphore's acquire, a "
                    "condition's wait or wait_for, or time.sleep): make the object that "
                    "owns the thread again at the resume, with portal.runtime.remake(obj, "
                    "factory, *args) where obj is made, or end the thread before the pause",
                )
    return (rebuild_condition, (cond._lock,))


def _threads_waiting_on(cond: Any) -> list[Any]:
    """The threads blocked in ``cond.wait()`` (a ``queue.get()``, an ``Event.wait()``)."""
    threading = sys.modules["threading"]
    wait = threading.Condition.wait.__code__
    found = []
    for ident, frame in sys._current_frames().items():
        f: Any = frame
        while f is not None:
            if f.f_code is wait and f.f_locals.get("self") is cond:
                thread = threading._active.get(ident)
                if thread is not None:
                    found.append(thread)
                break
            f = f.f_back
    return found


def rebuild_condition(lock: Any) -> Any:
    """A ``threading.Condition`` on ``lock`` (the carried one), with no waiters."""
    return sys.modules["threading"].Condition(lock)


# -- logging's QueueListener ------------------------------------------------------------------


def _reduce_queue_listener(listener: Any) -> Any:
    running = listener._thread is not None
    if running:
        listener.stop()  # every record queued so far is handled
        listener.start()
    return remade(
        listener,
        _make_queue_listener,
        type(listener),
        listener.queue,
        tuple(listener.handlers),
        listener.respect_handler_level,
        running,
    )


def _make_queue_listener(
    cls: type, queue: Any, handlers: tuple[Any, ...], respect_handler_level: bool, running: bool
) -> Any:
    listener = cls(queue, *handlers, respect_handler_level=respect_handler_level)
    if running:
        listener.start()
    return listener


# -- thread pools -----------------------------------------------------------------------------


def _reduce_executor(executor: Any) -> Any:
    if not executor._shutdown and not _executor_idle(executor):
        raise WaitForSafePoint(
            "a ThreadPoolExecutor has work queued or running: the pause waits until it is idle",
            ready=lambda: _executor_idle(executor),
        )
    return remade(
        executor,
        rebuild_executor,
        type(executor),
        executor._max_workers,
        executor._thread_name_prefix,
        executor._initializer,
        executor._initargs,
        executor._shutdown,
    )


def _executor_idle(executor: Any) -> bool:
    # A worker releases the idle semaphore when it finds the queue empty and waits for work.
    idle: bool = executor._work_queue.empty() and executor._idle_semaphore._value >= len(
        executor._threads
    )
    return idle


def rebuild_executor(
    cls: type,
    max_workers: int,
    prefix: str,
    initializer: Any,
    initargs: tuple[Any, ...],
    shutdown: bool,
) -> Any:
    """The executor made again (its workers start with its first task, as the first did)."""
    executor = cls(max_workers, prefix, initializer, initargs)
    if shutdown:
        executor.shutdown(wait=False)
    return executor


def _reduce_future(future: Any) -> Any:
    if not future.done():
        raise WaitForSafePoint(
            "a concurrent.futures.Future is not done: the pause waits for its result",
            ready=future.done,
        )
    return NotImplemented  # done: its state (result or exception) pickles as it is


# -- multiprocessing pools --------------------------------------------------------------------


def _reduce_pool(pool: Any) -> Any:
    mp_pool = sys.modules["multiprocessing.pool"]
    if pool._state != mp_pool.RUN:
        raise _refuse(
            pool,
            "it is closed or terminated, and its workers are ending: join it and drop the "
            "reference before the pause (or use it in a `with` block that ends first)",
        )
    if pool._cache:
        raise WaitForSafePoint(
            f"a {type(pool).__name__} has {len(pool._cache)} task(s) in flight: the pause "
            "waits until they are done",
            ready=lambda: not pool._cache,
        )
    if isinstance(pool, mp_pool.ThreadPool):
        return remade(pool, type(pool), pool._processes, pool._initializer, pool._initargs)
    context = sys.modules["multiprocessing.context"]
    method = None if pool._ctx is context._default_context else pool._ctx.get_start_method()
    return remade(
        pool,
        _make_pool,
        type(pool),
        pool._processes,
        pool._initializer,
        pool._initargs,
        pool._maxtasksperchild,
        method,
    )


def _make_pool(
    cls: type,
    processes: int,
    initializer: Any,
    initargs: tuple[Any, ...],
    maxtasksperchild: int | None,
    method: str | None,
) -> Any:
    context = None if method is None else sys.modules["multiprocessing"].get_context(method)
    return cls(processes, initializer, initargs, maxtasksperchild, context)


def _reduce_pool_cache(cache: Any) -> Any:
    """A pool's table of tasks in flight (every result and ``imap`` iterator holds it): empty
    when the pool is idle, it travels as an empty dict (its notifier is the pool's pipe)."""
    if cache:
        raise WaitForSafePoint(
            f"a multiprocessing pool has {len(cache)} task(s) in flight: the pause waits until "
            "they are done",
            ready=lambda: not cache,
        )
    return (dict, ())


def serializer_specs() -> list[SerializerSpec]:
    remakes_threads("logging.handlers.QueueListener")
    return [
        SerializerSpec(
            name="capture_workers",
            reducers={
                "threading.Condition": _reduce_condition,
                "logging.handlers.QueueListener": _reduce_queue_listener,
                "concurrent.futures.thread.ThreadPoolExecutor": _reduce_executor,
                "concurrent.futures._base.Future": _reduce_future,
                "multiprocessing.pool.Pool": _reduce_pool,
                "multiprocessing.pool._PoolCache": _reduce_pool_cache,
            },
            description="conditions without their waiting threads; a QueueListener, idle thread "
            "and process pools re-made with their arguments (busy ones defer the pause)",
        )
    ]
