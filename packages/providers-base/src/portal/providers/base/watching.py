"""Notice sources that watch metadata values with hanging GETs (GCP).

Where the service can hold a request open until a value changes (GCE's
``?wait_for_change=true&last_etag=...``), polling would spend a short notice waiting. Each watched
value gets a :class:`HangingGetWatcher`: a daemon thread with its own connection that does what
Google's clients do: a plain GET for the current value and its ETag (so a node restarted
mid-notice sees it), then hanging GETs on that ETag, sleeping and retrying on errors (about 1 s
after a 503, 5 s after a 429, doubling up to 5 s otherwise). ``poll`` only waits for what the
watchers saw.

Every change a watcher sees is queued and handed to :meth:`WatchingNoticeSource.apply` in order,
so a value flapping ``TRUE -> FALSE -> TRUE`` is reported as it happened. Values compare as
upper-case text: metadata booleans and enums are case-insensitive.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence

import attrs

from portal.core.clock import SYSTEM_CLOCK, Clock
from portal.core.domain import Notice
from portal.providers.base.metadata import Answer, MetadataHTTP, MetadataUnavailable
from portal.providers.base.source import MetadataNoticeSource

__all__ = ["HangingGetWatcher", "Seen", "Watched", "WatchingNoticeSource"]

#: The longest pause between a watcher's failed requests.
MAX_RETRY_S = 5.0


@attrs.frozen
class Watched:
    """A value to watch: its path, and ``parse``, which raises :class:`ValueError` for a value
    the service does not document (an error, never a notice)."""

    path: str
    parse: Callable[[str], object]


@attrs.frozen
class Seen:
    """One value a watcher read: which path, the value, when it was first seen, its ETag."""

    key: str
    value: str
    at: float
    etag: str


class HangingGetWatcher:
    """Watches one metadata value with hanging GETs in a daemon thread."""

    def __init__(self, source: WatchingNoticeSource, watched: Watched, http: MetadataHTTP) -> None:
        self.source = source
        self.path = watched.path
        self.parse = watched.parse
        self.http = http
        self.value: str | None = None
        self.error: MetadataUnavailable | None = None
        self.stop = threading.Event()
        name = f"portal-{source.metadata.provider}{self.path}"
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _read(self, etag: str | None) -> Answer:
        s = self.source
        if etag is None:
            return self.http.request("GET", self.path, timeout_s=s.request_timeout_s)
        hang = max(1, round(s.hang_s))
        # The server answers at the hang's end with the current value; a margin more for the
        # trip, after which a server that stopped answering is an error.
        return self.http.request(
            "GET", self.path + s.wait_query(etag, hang), timeout_s=hang + max(1.0, hang / 5)
        )

    def _run(self) -> None:
        s = self.source
        etag: str | None = None
        failures = 0
        while not self.stop.is_set():
            try:
                answer = self._read(etag)
                s.check(answer, self.http.url(self.path))
                self.parse(answer.text)  # ValueError: not a documented value
                new_etag = answer.header("etag")
                if not new_etag:
                    raise ValueError("the answer has no ETag to wait on")
                value = answer.text.upper()
                if value != self.value:
                    s._seen(self, value, new_etag)
                self.value = value
                etag = new_etag
                failures = 0
                s._healthy(self)
                continue
            except MetadataUnavailable as exc:
                if self.stop.is_set():
                    return
                s._failed(self, exc)
                # 503 (maintenance): retry after about a second, as Google advises; back off
                # further from a rate limit or a server that keeps failing.
                status = exc.details.get("status")
                if status == 503:
                    delay = 1.0
                elif status == 429:
                    delay = MAX_RETRY_S
                else:
                    delay = min(MAX_RETRY_S, 2.0**failures)
            except ValueError as exc:
                s._failed(self, s.unreadable(self.http.url(self.path), exc))
                etag = None  # read the value afresh rather than wait on an ETag of garbage
                delay = min(MAX_RETRY_S, 1.0 * 2**failures)
            failures += 1
            self.stop.wait(delay)


class WatchingNoticeSource(MetadataNoticeSource):
    """The template of a source whose values are watched with hanging GETs.

    A subclass lists what it :meth:`watched`, spells the service's :meth:`wait_query`, turns
    each :class:`Seen` change into notices in :meth:`apply`, and may tighten :meth:`check`.
    """

    def __init__(
        self,
        *,
        override: str | None = None,
        dmi_dir: str | os.PathLike[str] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        request_timeout_s: float = 1.0,
        hang_s: float = 30.0,
    ) -> None:
        super().__init__(
            override=override, dmi_dir=dmi_dir, clock=clock, request_timeout_s=request_timeout_s
        )
        self.hang_s = hang_s
        self._cond = threading.Condition()
        self._queue: list[Seen] = []
        self._watchers: list[HangingGetWatcher] = []

    # --- what a subclass implements ------------------------------------------------------------

    def watched(self) -> Sequence[Watched]:
        """The values to watch, one thread and connection each."""
        raise NotImplementedError

    def wait_query(self, etag: str, hang_s: int) -> str:
        """The query that makes a GET hang until the value's ETag is no longer ``etag``, or
        ``hang_s`` passed (GCE: ``?wait_for_change=true&last_etag=...&timeout_sec=...``)."""
        raise NotImplementedError

    def apply(self, seen: Seen) -> list[Notice]:
        """The notices and withdrawals one value change makes (use the report-once book)."""
        raise NotImplementedError

    def check(self, answer: Answer, url: str) -> None:
        """Raises :class:`MetadataUnavailable` unless ``answer`` is a value from the service."""
        self.expect(answer, url)

    # --- the protocol --------------------------------------------------------------------------

    def poll(self, timeout_s: float = 0.0) -> Sequence[Notice]:
        """Waits up to ``timeout_s`` for a watcher to see a change; reports it. Raises a
        watcher's error when nothing changed while one is failing."""
        self._start()
        end = self.clock.monotonic() + max(0.0, timeout_s)
        changes: list[Notice] = []
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    left = end - self.clock.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                seen, self._queue = self._queue, []
            for item in seen:
                changes.extend(self.apply(item))
            if changes or self._closed or self.clock.monotonic() >= end:
                break
        if not changes:
            errors = [w.error for w in self._watchers if w.error is not None]
            if errors:
                raise errors[0]
        return changes

    def close(self) -> None:
        """Stops the watchers (interrupting their hanging GETs) and waits for them."""
        for watcher in self._watchers:
            watcher.stop.set()
        super().close()
        with self._cond:
            self._cond.notify_all()
        for watcher in self._watchers:
            if watcher.thread.is_alive():
                watcher.thread.join(timeout=5.0)
        self._watchers = []

    # --- the watchers ----------------------------------------------------------------------------

    def _start(self) -> None:
        if self._watchers or self._closed:
            return
        self._watchers = [HangingGetWatcher(self, w, self.new_client()) for w in self.watched()]
        for watcher in self._watchers:
            watcher.thread.start()

    def _seen(self, watcher: HangingGetWatcher, value: str, etag: str) -> None:
        with self._cond:
            self._queue.append(Seen(watcher.path, value, self.clock.now(), etag))
            self._cond.notify_all()

    def _healthy(self, watcher: HangingGetWatcher) -> None:
        if watcher.error is not None:
            watcher.error = None
            self.problems.clear(watcher.path)

    def _failed(self, watcher: HangingGetWatcher, error: MetadataUnavailable) -> None:
        watcher.error = error
        self.problems.report(watcher.path, error.message)
        with self._cond:
            self._cond.notify_all()
