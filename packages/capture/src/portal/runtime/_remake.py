"""``portal.runtime.remake``: the program's way to carry an object that owns a thread, a
process or a socket, as what made it (see :mod:`portal.capture.remade`)."""

from __future__ import annotations

TYPE_CHECKING = False  # no typing import at start-up (see portal.runtime._rt)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    T = TypeVar("T")

__all__ = ["remake"]


def remake(
    obj: T,
    factory: Callable[..., Any],
    /,
    *args: Any,
    quiesce: Callable[[T], object] | None = None,
    **kwargs: Any,
) -> T:
    """Carry ``obj`` across a pause as ``factory(*args, **kwargs)``, made again at the resume
    once the job's files and environment are back, and return ``obj``::

        writer = portal.runtime.remake(MyWriter("events.log"), MyWriter, "events.log",
                                       quiesce=MyWriter.flush)

    For an object that owns what a checkpoint cannot carry: a worker thread and its queue, a
    process pool, a connection. With ``factory`` its own class, ``obj.__init__`` runs again on
    the very object the program holds; any other factory's result gives ``obj`` its attributes.
    ``quiesce(obj)`` runs at each pause and each check before ``obj`` travels: flush what it has
    buffered, so that nothing it was given is lost (what the worker held in memory is not
    carried). The arguments travel as any value does; the object itself is never pickled.
    Outside Portal it only returns ``obj``. Registering the same object again replaces its
    recipe."""
    from portal.capture import remade  # here: kept off the runtime's start-up

    remade.register(obj, factory, args, kwargs, quiesce)
    return obj
