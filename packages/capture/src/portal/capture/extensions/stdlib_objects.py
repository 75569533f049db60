"""Standard-library C objects that pickle refuses although nothing of the process is in them at
the pause: unlocked locks, made again as new unlocked locks, thread-local storage, made again
with the program thread's values, and ``struct.Struct``, made again from its format.

``capture_locks``: the issue's rule is that a value holding no live resource of the process
travels, and one that does is re-created on resume where that is safe. A ``_thread.lock`` or
``_thread.RLock`` that nobody holds at the safe point is only a flag: a new unlocked lock is the
same thing in the new process (other threads never travel: the pause waits while one is held),
and so ``threading.Condition``, ``Semaphore``, ``Event`` and ``Barrier`` built on such locks
travel too (they are Python objects around them), as does a ``queue.Queue``. A lock *held* at
the pause (the program is inside ``with lock:``, or another thread holds it) cannot be held
again for its owner in the new process: it is refused, named as such, which defers the pause.
Subclasses of ``_thread.RLock`` are refused by name (their own state is unknown here).

``capture_thread_locals``: a ``threading.local`` (mpmath keeps its caches in two) is, for the
program, the program thread's attributes on it: they travel, and the object is a new
``threading.local`` holding them for the thread that resumes the program (threads the pause did
not carry have no values left to keep). Subclasses are refused by name: the C object keeps the
arguments it calls ``__init__`` with in each new thread, which Python cannot read.

``capture_structs``: a ``struct.Struct`` is its format (its size and codes are computed from it),
so it travels as that; its bound methods (``int2byte = struct.Struct(">B").pack``) pickle as the
method of the carried object, as any builtin method does.

The rebuild functions' names are part of the checkpoint format: rename none of them.
"""

from __future__ import annotations

import _thread
import struct
from typing import Any

from portal.core.specs import SerializerSpec

__all__ = [
    "rebuild_lock",
    "rebuild_rlock",
    "rebuild_struct",
    "rebuild_thread_local",
    "serializer_specs",
]


def _refuse(obj: object, reason: str) -> TypeError:
    t = type(obj)
    return TypeError(f"cannot pickle '{t.__module__}.{t.__qualname__}' object: {reason}")


def _held(lock: object) -> TypeError:
    return _refuse(
        lock,
        "it is a lock held at the pause (a new process cannot hold it for its owner: release "
        "it before the pause point, e.g. end the `with` block before the loop's next step)",
    )


# -- locks ------------------------------------------------------------------------------------


def _reduce_lock(lock: Any) -> tuple[Any, ...]:
    if lock.locked():
        raise _held(lock)
    return (rebuild_lock, ())


def _reduce_rlock(rlock: Any) -> tuple[Any, ...]:
    if type(rlock) is not _thread.RLock:
        raise _refuse(rlock, "a subclass of _thread.RLock cannot be carried")
    # An RLock says only whether *this* thread owns it: one this thread owns is held; a try to
    # take it without waiting tells whether another thread holds it (given back at once).
    if rlock._is_owned() or not rlock.acquire(blocking=False):  # type: ignore[attr-defined]
        raise _held(rlock)
    rlock.release()
    return (rebuild_rlock, ())


def rebuild_lock() -> Any:
    """A new unlocked ``_thread.lock`` (what ``threading.Lock()`` makes)."""
    return _thread.allocate_lock()


def rebuild_rlock() -> Any:
    """A new ``_thread.RLock`` that nobody owns."""
    return _thread.RLock()


# -- threading.local --------------------------------------------------------------------------


def _reduce_thread_local(obj: Any) -> tuple[Any, ...]:
    if type(obj) is not _thread._local:
        raise _refuse(
            obj,
            "a subclass of threading.local cannot be carried (the arguments its __init__ is "
            "called with in each thread cannot be read)",
        )
    # The pause is taken in the program's thread: ``__dict__`` is that thread's values.
    return (rebuild_thread_local, (), dict(obj.__dict__) or None)


def rebuild_thread_local() -> Any:
    """A new ``threading.local``; pickle then sets the carried values for this thread."""
    return _thread._local()


# -- struct.Struct ----------------------------------------------------------------------------


def _reduce_struct(obj: Any) -> tuple[Any, ...]:
    if type(obj) is not struct.Struct:
        raise _refuse(obj, "a subclass of struct.Struct cannot be carried")
    return (rebuild_struct, (obj.format,))


def rebuild_struct(fmt: str) -> struct.Struct:
    """The ``struct.Struct`` of format ``fmt``."""
    return struct.Struct(fmt)


def serializer_specs() -> list[SerializerSpec]:
    return [
        SerializerSpec(
            name="capture_locks",
            reducers={"_thread.LockType": _reduce_lock, "_thread.RLock": _reduce_rlock},
            description="locks nobody holds at the pause, re-created unlocked (a held one "
            "defers the pause, named)",
        ),
        SerializerSpec(
            name="capture_thread_locals",
            reducers={"_thread._local": _reduce_thread_local},
            description="threading.local objects, with the program thread's values",
        ),
        SerializerSpec(
            name="capture_structs",
            reducers={"_struct.Struct": _reduce_struct},
            description="struct.Struct objects, by their format (their bound methods with them)",
        ),
    ]
