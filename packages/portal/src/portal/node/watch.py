"""Watching notice sources: one thread per source, notices into one queue.

A source's ``poll`` may block (GCP's hanging GET), so each runs on its own daemon thread. A source
that fails is logged once per distinct problem and polled again after a pause: a flaky metadata
service never stops the node, and never turns into an invented notice. A source that returns at
once with nothing is polled again only once its timeout is over (it would otherwise spin a core).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from portal.core.clock import Clock
from portal.core.domain import Notice
from portal.core.plugins import Plugins, call_factory
from portal.core.specs import NoticeSource, NoticeSourceContext

__all__ = ["NoticeWatcher", "open_sources"]

log = logging.getLogger("portal.node.notices")
#: How long one poll may wait for a change. :meth:`NoticeWatcher.stop` waits for the polls in
#: flight (a source is acknowledged through after it, with no poll sharing its connection), so
#: this bounds what a job's end waits on its sources; a notice comes as soon as it is seen.
POLL_TIMEOUT_S = 0.25


def open_sources(
    plugins: Plugins,
    *,
    clock: Clock,
    environ: Mapping[str, str],
    settings: Mapping[str, object],
    report: Callable[[str], None] | None = None,
) -> list[NoticeSource]:
    """Every installed notice source that detects its platform on this machine (``report``:
    what they say of a notice they ignore, to the job's events)."""
    context = NoticeSourceContext(
        clock=clock,
        settings=dict(settings),
        environ=dict(environ),
        **({"report": report} if report is not None else {}),
    )
    sources: list[NoticeSource] = []
    for name, spec in sorted(plugins.notice_sources().items()):
        try:
            source = call_factory(spec.factory, context, what=f"notice source {name!r}")
            if source.detect():
                sources.append(source)
            else:
                source.close()
        except Exception as exc:
            log.warning("notice source %s is not watched: %s", name, exc)
    return sources


class NoticeWatcher:
    """Polls each source on its own thread; :meth:`get` returns what they reported."""

    def __init__(
        self, sources: Iterable[NoticeSource], *, poll_timeout_s: float = POLL_TIMEOUT_S
    ) -> None:
        self.sources = list(sources)
        self.poll_timeout_s = poll_timeout_s
        self._queue: queue.Queue[Notice] = queue.Queue()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(s,), name=f"notices-{s.name}", daemon=True)
            for s in self.sources
        ]

    def start(self) -> NoticeWatcher:
        for thread in self._threads:
            thread.start()
        return self

    def _run(self, source: NoticeSource) -> None:
        problems: set[str] = set()
        while not self._stop.is_set():
            try:
                started = time.monotonic()
                notices = source.poll(self.poll_timeout_s)
                for notice in notices:
                    self._queue.put(notice)
                if not notices:
                    # A source that returns at once with nothing (not blocking as the contract
                    # asks) would make this loop spin a core: the rest of its timeout is waited.
                    self._stop.wait(started + self.poll_timeout_s - time.monotonic())
            except Exception as exc:
                text = f"{type(exc).__name__}: {exc}"
                if text not in problems:  # one line per distinct problem
                    problems.add(text)
                    log.warning("notice source %s: %s (still watching)", source.name, text)
                self._stop.wait(1.0)

    def get(self, timeout_s: float) -> list[Notice]:
        """Notices reported since the last call, waiting up to ``timeout_s`` for the first."""
        out: list[Notice] = []
        try:
            out.append(self._queue.get(timeout=timeout_s))
        except queue.Empty:
            return out
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                return out

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.sources]

    def stop(self) -> None:
        """Stop polling; the sources stay open (the node may still acknowledge through one,
        with no poll sharing its connection)."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=2.0)

    def close(self) -> None:
        self.stop()
        for source in self.sources:
            try:
                source.close()
            except Exception as exc:
                log.warning("closing notice source %s: %s", source.name, exc)
