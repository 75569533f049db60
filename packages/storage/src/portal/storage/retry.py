"""Retrying transient storage failures with back-off, on an injectable clock.

A notice leaves a minute or two; one dropped connection must not cost the checkpoint, and a store
that is down must not hang the node past its deadline. So: a few attempts, exponential back-off
with jitter (so parallel transfers do not retry in lockstep), and then a
:class:`StorageUnavailableError` that names the URL, the object and the last error.

What counts as transient: connection resets and timeouts, and the throttling/5xx errors the cloud
clients raise as ``OSError`` subclasses or their own connection errors. A missing object
(:class:`FileNotFoundError`) and refused permissions are answers, not failures: never retried.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TypeVar

import attrs

from portal.core.clock import SYSTEM_CLOCK, Clock
from portal.core.errors import PortalError
from portal.storage.errors import StorageUnavailableError

__all__ = ["RetryPolicy", "is_transient"]

T = TypeVar("T")

_NOT_TRANSIENT: tuple[type[BaseException], ...] = (
    FileNotFoundError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)
# Class names the cloud clients use for failures worth another try (matched by name so that no
# cloud library has to be imported to classify an error).
_TRANSIENT_NAMES = frozenset(
    {
        "ClientConnectionError",
        "ClientOSError",
        "ServerDisconnectedError",
        "ClientPayloadError",
        "ServerTimeoutError",
        "EndpointConnectionError",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "ConnectionClosedError",
        "ServiceRequestError",
        "ServiceResponseError",
        "HttpError",
        "IncompleteReadError",
        "ResponseStreamingError",
        "TransientError",
    }
)


def is_transient(exc: BaseException) -> bool:
    """Whether another attempt may succeed where ``exc`` failed."""
    if isinstance(exc, _NOT_TRANSIENT):
        return False
    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & _TRANSIENT_NAMES:
        return True
    if isinstance(exc, OSError):
        # s3fs/gcsfs/adlfs turn throttling and 5xx answers into plain OSError (errno EIO/EAGAIN,
        # or none); a local disk error has a specific errno that retrying will not fix.
        import errno

        return exc.errno in (None, errno.EIO, errno.EAGAIN, errno.EBUSY, errno.ETIMEDOUT)
    return False


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """How often and how patiently to retry one storage request."""

    attempts: int = attrs.field(default=5, validator=attrs.validators.ge(1))
    base_delay_s: float = 0.2
    max_delay_s: float = 5.0
    clock: Clock = SYSTEM_CLOCK
    jitter: Callable[[], float] = attrs.field(default=random.random)  # in [0, 1)

    def delay_s(self, attempt: int) -> float:
        """Back-off before attempt ``attempt + 1`` (``attempt`` counts from 1): full jitter."""
        ceiling = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
        return float(ceiling * (0.5 + 0.5 * self.jitter()))

    def call(self, fn: Callable[[], T], *, what: str, url: str) -> T:
        """Run ``fn``; retry transient failures; raise :class:`StorageUnavailableError` at the end.

        ``what`` names the operation and object for the message ("write jobs/j1/chunks/...").
        """
        for attempt in range(1, self.attempts + 1):
            try:
                return fn()
            except Exception as exc:
                if isinstance(exc, FileNotFoundError | FileExistsError | PortalError):
                    raise  # an answer, not a failure (FileExistsError: a conditional write lost)
                if not is_transient(exc):
                    raise StorageUnavailableError(
                        f"could not {what} in {url}: {type(exc).__name__}: {exc}. This is not a "
                        "transient error, so it was not retried: check the URL, the credentials "
                        "and the bucket's permissions",
                        details={"url": url, "operation": what, "error": type(exc).__name__},
                    ) from exc
                if attempt == self.attempts:
                    raise StorageUnavailableError(
                        f"could not {what} in {url} after {self.attempts} attempts: "
                        f"{type(exc).__name__}: {exc}. The store is unreachable or failing; the "
                        "previous checkpoint is untouched. Check the network and the store, then "
                        "try again",
                        details={
                            "url": url,
                            "operation": what,
                            "error": type(exc).__name__,
                            "attempts": self.attempts,
                        },
                    ) from exc
                self.clock.sleep(self.delay_s(attempt))
        raise AssertionError("unreachable")  # pragma: no cover
