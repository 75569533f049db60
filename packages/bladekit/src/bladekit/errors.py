"""Errors bladekit raises, each with a stable ``code``.

:class:`RunError` and :class:`PreemptedError` are *the same classes* as
``portal.core.errors`` (re-exported, not copied), so code that catches Portal's errors catches
bladekit's. A ``RunError`` is an infrastructure outcome of a run; an exception raised by the
user's own code is never turned into one: it reaches the caller as itself (see
:class:`RemoteError` for the one case where it cannot).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from portal.core.errors import InvalidArgumentError, PortalError, PreemptedError, RunError

__all__ = [
    "AppStoppedError",
    "ContainerExitedError",
    "InvalidArgumentError",
    "PortalError",
    "PreemptedError",
    "RemoteError",
    "RunError",
    "SerializationError",
]


class ContainerExitedError(RunError):
    """A container ended without answering and without a preemption (crash, OOM kill, exit()).

    Not retried: unlike a preemption, nothing says another attempt would fare better.
    """

    code: ClassVar[str] = "CONTAINER_EXITED"


class AppStoppedError(RunError):
    """A call was cut short because its app stopped (its ``with app.run():`` block ended).

    As with Modal's ephemeral apps, leaving the block stops what was started inside it. Wait for
    results inside the block (``call.get()``), or use ``app.run(detach=True)`` to let runs finish.
    """

    code: ClassVar[str] = "APP_STOPPED"


class RemoteError(PortalError):
    """An exception of the user's code that could not be sent back to the caller as itself.

    Raised only when the original exception cannot be pickled (it holds a lock, a socket, ...).
    ``type_name`` is the original exception's qualified type name and ``traceback_text`` the
    traceback as the container printed it, so nothing is lost but the object itself.
    """

    code: ClassVar[str] = "REMOTE_ERROR"

    def __init__(
        self,
        message: str,
        *,
        type_name: str,
        traceback_text: str,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message, details=details)
        self.type_name = type_name
        self.traceback_text = traceback_text


class SerializationError(PortalError):
    """Arguments or a return value could not cross the process boundary (cloudpickle refused)."""

    code: ClassVar[str] = "SERIALIZATION_ERROR"
