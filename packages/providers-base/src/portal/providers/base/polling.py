"""Notice sources that poll metadata documents, each on its own schedule (AWS, Azure).

Most metadata services offer no push channel on the machine, so the source reads each document
when it is due: a notice document every second or so (a notice may be only 30 s long), slower
ones less often. ``poll`` reads what is due and returns as soon as something changed; otherwise
it sleeps (on the injected clock) until the next document is due or its timeout ends.

Failures are values, not silence: a document that cannot be read raises
:class:`~portal.providers.base.metadata.MetadataUnavailable` from ``poll`` (after the other due
documents were read, unless the service as a whole is unreachable), logged once per distinct
problem; a rate limit (429) pushes that document back at least
:data:`RATE_LIMIT_BACKOFF_S`. A notice that appeared meanwhile is reported on the next poll.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import attrs

from portal.core.clock import SYSTEM_CLOCK, Clock
from portal.core.domain import Notice
from portal.core.errors import InvalidArgumentError
from portal.providers.base.metadata import Answer, MetadataUnavailable
from portal.providers.base.source import MetadataNoticeSource

__all__ = ["RATE_LIMIT_BACKOFF_S", "Document", "PollingNoticeSource"]

#: After a 429, the document waits at least this long (every cloud asks for seconds, not ms).
RATE_LIMIT_BACKOFF_S = 5.0


@attrs.frozen
class Document:
    """One document a polling source reads every ``interval_s``.

    ``changes`` turns a 200 answer into new notices and withdrawals; it raises
    :class:`ValueError` when the body is not the documented shape (an error, never "no notice").
    ``key`` names the document in problem keys (default: its path).
    """

    path: str
    interval_s: float
    changes: Callable[[Answer], list[Notice]]
    key: str = ""


class PollingNoticeSource(MetadataNoticeSource):
    """The template of a source that polls documents. A subclass lists its :meth:`documents`
    and may override :meth:`fetch` (tokens, first-request timeouts, hints)."""

    def __init__(
        self,
        *,
        override: str | None = None,
        dmi_dir: str | os.PathLike[str] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        request_timeout_s: float = 1.0,
    ) -> None:
        super().__init__(
            override=override, dmi_dir=dmi_dir, clock=clock, request_timeout_s=request_timeout_s
        )
        self._next_due: dict[str, float] = {}

    def documents(self) -> Sequence[Document]:
        """The documents to read, in the order a round reads them (the most urgent first)."""
        raise NotImplementedError

    def fetch(self, document: Document) -> Answer:
        """Read ``document``: a 200 (its content) or 404 (absent: no notice), else raises."""
        return self.request("GET", document.path, ok=(200, 404))

    def poll(self, timeout_s: float = 0.0) -> Sequence[Notice]:
        """Reads each document when it is due; returns as soon as something changed."""
        end = self.clock.monotonic() + max(0.0, timeout_s)
        while True:
            changes, error = self._round()
            if changes:
                return changes
            if error is not None:
                raise error
            now = self.clock.monotonic()
            next_due = min(self._next_due.values())
            if next_due > end:
                self.clock.sleep(max(0.0, end - now))
                return []
            self.clock.sleep(max(0.0, next_due - now))

    def _round(self) -> tuple[list[Notice], MetadataUnavailable | None]:
        """Reads the documents that are due; the changes, and the first error if any."""
        changes: list[Notice] = []
        first_error: MetadataUnavailable | None = None
        for document in self.documents():
            key = document.key or document.path
            now = self.clock.monotonic()
            if self._next_due.get(key, 0.0) > now:
                continue
            self._next_due[key] = now + document.interval_s
            try:
                answer = self.fetch(document)
                found = document.changes(answer) if answer.status == 200 else []
            except MetadataUnavailable as exc:
                status = exc.details.get("status")
                self.problems.report(f"{key}:{status}" if status else "unreachable", exc.message)
                first_error = first_error or exc
                if status == 429:
                    self._next_due[key] = now + max(document.interval_s, RATE_LIMIT_BACKOFF_S)
                if status is None:
                    break  # the service itself is unreachable: the others wait for next round
                continue
            except InvalidArgumentError:
                raise  # a setting is wrong (the endpoint override), not the answer
            except ValueError as exc:
                error = self.unreadable(self.client().url(document.path), exc)
                self.problems.report(f"malformed:{key}", error.message)
                first_error = first_error or error
                continue
            self.problems.clear("unreachable")
            self.problems.clear_prefix(f"{key}:")
            self.problems.clear(f"malformed:{key}")
            changes.extend(found)
        return changes, first_error
