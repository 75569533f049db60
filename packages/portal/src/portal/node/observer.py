"""Who else watches a node's attempt: an observer told of its checks and of how its pause ended.

The node knows its job, its runtime and the control plane; what a *placement* does with the
node's measures (the simulated cloud moves a job off a spot machine it has outgrown:
:mod:`portal.sim.outgrow`) is not the node's business. The node is a process of its own, so
whoever starts it names the observer in its environment (``PORTAL_NODE_OBSERVER=module:factory``,
the factory called with ``(plane, job_id, environ)`` and returning an observer or None), and the
node imports nothing of it by name. An observer never stops the job it watches: what it raises
is logged and the node goes on.
"""

from __future__ import annotations

import logging
import pkgutil
from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["OBSERVER_ENV", "NodeObserver", "load_observer"]

log = logging.getLogger("portal.node")

#: ``module:factory`` of the attempt's observer (set by whoever starts the node).
OBSERVER_ENV = "PORTAL_NODE_OBSERVER"


class NodeObserver(Protocol):
    """What a node tells its observer, in the order it happens."""

    def checked(self, checked_bytes: int, *, partial: bool, pids: list[int]) -> object:
        """A checkpoint check reported: the pickle it walked (``partial``: cut short by its
        budget) and the job's processes, to measure again."""

    def not_suspended(self, why: str) -> None:
        """A pause asked for did not suspend the job (abandoned, failed, the job ended first,
        its checkpoint could not be stored)."""

    def suspended(self, checkpoint_id: str) -> object:
        """The job is suspended from ``checkpoint_id``; this attempt's node ends next."""


class _Unwatched:
    """No observer: the node's calls cost nothing."""

    def checked(self, checked_bytes: int, *, partial: bool, pids: list[int]) -> object:
        return None

    def not_suspended(self, why: str) -> None:
        return None

    def suspended(self, checkpoint_id: str) -> object:
        return None


class _Guarded:
    """An observer whose failures are logged, never raised into the node."""

    def __init__(self, observer: NodeObserver, name: str) -> None:
        self._observer = observer
        self._name = name

    def _call(self, method: str, *args: Any, **kwargs: Any) -> object:
        try:
            return getattr(self._observer, method)(*args, **kwargs)
        except Exception:
            log.exception("the node's observer %s failed in %s", self._name, method)
            return None

    def checked(self, checked_bytes: int, *, partial: bool, pids: list[int]) -> object:
        return self._call("checked", checked_bytes, partial=partial, pids=pids)

    def not_suspended(self, why: str) -> None:
        self._call("not_suspended", why)

    def suspended(self, checkpoint_id: str) -> object:
        return self._call("suspended", checkpoint_id)


def load_observer(plane: Any, job_id: str, environ: Mapping[str, str]) -> NodeObserver:
    """The observer ``environ`` names (:data:`OBSERVER_ENV`), or one that does nothing. A name
    that cannot be loaded is logged and the job runs unobserved: it must run on regardless."""
    name = environ.get(OBSERVER_ENV, "").strip()
    if not name:
        return _Unwatched()
    try:
        factory = pkgutil.resolve_name(name)
        observer = factory(plane, job_id, environ)
    except Exception:
        log.exception("the node's observer %s (%s) could not be started", name, OBSERVER_ENV)
        return _Unwatched()
    return _Unwatched() if observer is None else _Guarded(observer, name)
