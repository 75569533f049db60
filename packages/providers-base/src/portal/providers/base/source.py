"""What every metadata notice source does the same way, whether it polls or hangs.

A provider describes its metadata service once (:class:`MetadataService`: where it is, how DMI
names the platform, which variable overrides the address, what each HTTP status means) and
subclasses :class:`MetadataNoticeSource`, which then owns:

- detection: an override, or DMI naming the platform; never the network;
- the clients' life cycle: refused off-platform without an override, one shared keep-alive
  connection (and more for hanging GETs), every one closed by :meth:`~MetadataNoticeSource.close`;
- errors: an HTTP status becomes a :class:`MetadataUnavailable` worded from the service's table,
  an unreadable body another one, both naming the endpoint;
- deadlines the service states in its own clock, converted to this machine's (skew logged once);
- report-once / withdraw-once bookkeeping, so ``poll`` returns changes, never repeats.

What stays with the provider is only its own: its documents, their parsing, its hints.
:mod:`portal.providers.base.polling` and :mod:`portal.providers.base.watching` add the two ways
of waiting for a change (due-time polling, hanging GETs).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar, Self

import attrs

from portal.core.clock import SYSTEM_CLOCK, Clock
from portal.core.domain import Notice, NoticeKind
from portal.core.errors import PortalError
from portal.core.specs import NoticeSourceContext
from portal.providers.base.dmi import read_dmi
from portal.providers.base.metadata import (
    Answer,
    MetadataHTTP,
    MetadataUnavailable,
    open_client,
    skew_s,
)
from portal.providers.base.problems import ProblemLog

__all__ = ["MAX_SKEW_S", "PLAUSIBLE_S", "MetadataNoticeSource", "MetadataService"]

#: A service ``Date`` further than this from this machine's clock is a bad header, not skew (an
#: hour: a VM without NTP drifts minutes, not more).
MAX_SKEW_S = 3600.0
#: A notice time further than this from now is malformed, never a notice.
PLAUSIBLE_S = 86_400.0


@attrs.frozen(kw_only=True)
class MetadataService:
    """A provider's metadata service, as its notice source reaches and names it.

    ``service`` names it in error messages (``"IMDS at http://... answered 403"``); ``what`` in
    the client's own (connection refused, timeouts), when that should say more (``"AWS instance
    metadata (IMDS)"``). ``hints`` words an HTTP status, after ``"<service> at <url> "``; any
    other status reads ``other_status``.
    """

    provider: str  # "aws": Notice.provider, and the logger portal.notices.<provider>
    cloud: str  # "AWS": names the source in its errors ("the AWS notice source is closed")
    platform: str  # "EC2": what DMI must say for the source to contact the service
    service: str  # "IMDS"
    override_env: str  # where a test endpoint comes from ("AWS_EC2_METADATA_SERVICE_ENDPOINT")
    default_endpoint: str  # "http://169.254.169.254"
    on_platform: Callable[[Mapping[str, str]], bool]  # DMI strings -> on this platform?
    what: str = ""
    path_prefix: str = ""
    headers: Mapping[str, str] = attrs.field(factory=dict)
    hints: Mapping[int, str] = attrs.field(factory=dict)
    other_status: str = "answered HTTP {status}; retrying"


class MetadataNoticeSource:
    """The template of a notice source that reads a cloud's metadata service over HTTP.

    A subclass sets :attr:`name` and :attr:`metadata`, and adds how it waits for changes
    (:class:`~portal.providers.base.polling.PollingNoticeSource`,
    :class:`~portal.providers.base.watching.WatchingNoticeSource`). ``override`` is a test
    endpoint (``http://host[:port]``); without one, the service is contacted only where DMI (read
    from ``dmi_dir``) names the platform.
    """

    name: str
    metadata: ClassVar[MetadataService]
    #: True where report keys are notice ids, which a platform never reuses: a withdrawn notice
    #: then stays withdrawn even if its document lists it again. False where keys are what the
    #: notice is about (an event, a watched value): a later notice under the key is reported.
    remember_withdrawn: ClassVar[bool] = False

    def __init__(
        self,
        *,
        override: str | None = None,
        dmi_dir: str | os.PathLike[str] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        request_timeout_s: float = 1.0,
    ) -> None:
        self.override = override
        self.dmi_dir = dmi_dir
        self.clock = clock
        self.request_timeout_s = request_timeout_s
        self.log = logging.getLogger(f"portal.notices.{self.metadata.provider}")
        self.problems = ProblemLog(self.log)
        self._detected: bool | None = None
        self._shared: MetadataHTTP | None = None
        self._clients: list[MetadataHTTP] = []
        #: key -> the notice reported under it and not withdrawn (or, with remember_withdrawn,
        #: withdrawn): what makes each notice and each withdrawal reported once.
        self._reported: dict[str, Notice] = {}
        self._skew_logged = False
        self._closed = False

    @classmethod
    def from_context(cls, context: NoticeSourceContext) -> Self:
        """Built as the node builds it: the override from the ``<provider>.metadata_endpoint``
        setting or the service's variable in ``context.environ`` (never ``os.environ``), the
        ``dmi_dir`` setting, the clock. A source with settings of its own overrides this."""
        m = cls.metadata
        s = context.settings
        override = s.get(f"{m.provider}.metadata_endpoint") or context.environ.get(m.override_env)
        return cls(override=override or None, dmi_dir=s.get("dmi_dir"), clock=context.clock)

    # --- detection and clients ---------------------------------------------------------------

    def detect(self) -> bool:
        """An override, or DMI naming the platform. Reads local files only; never the network."""
        if self._detected is None:
            on_platform = self.metadata.on_platform
            self._detected = bool(self.override) or on_platform(read_dmi(self.dmi_dir))
        return self._detected

    def client(self) -> MetadataHTTP:
        """The shared keep-alive connection, opened on first use."""
        if self._shared is None:
            self._shared = self.new_client()
        return self._shared

    def new_client(self) -> MetadataHTTP:
        """A connection of its own (a hanging GET holds one), closed with the source.

        Refused when the source is closed, and off-platform without an override.
        """
        m = self.metadata
        if self._closed:
            raise PortalError(f"the {m.cloud} notice source is closed")
        client = open_client(
            source=m.cloud,
            platform=m.platform,
            on_platform=self.detect(),
            override=self.override,
            override_env=m.override_env,
            default_endpoint=m.default_endpoint,
            what=m.what or m.service,
            path_prefix=m.path_prefix,
            headers=m.headers,
        )
        self._clients.append(client)
        return client

    @contextlib.contextmanager
    def one_off_client(self) -> Iterator[MetadataHTTP]:
        """A connection for a few requests (machine facts), closed after the block."""
        client = self.new_client()
        try:
            yield client
        finally:
            client.close()
            with contextlib.suppress(ValueError):  # close() may have dropped it already
                self._clients.remove(client)

    def close(self) -> None:
        """Close every connection, interrupting a request in progress. Idempotent; final."""
        self._closed = True
        for client in list(self._clients):
            client.close()
        self._clients = []
        self._shared = None

    # --- requests and errors -----------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        timeout_s: float | None = None,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        ok: tuple[int, ...] = (200,),
    ) -> Answer:
        """One request on the shared connection; a status not in ``ok`` raises, worded."""
        client = self.client()
        timeout = self.request_timeout_s if timeout_s is None else timeout_s
        answer = client.request(method, path, timeout_s=timeout, headers=headers, body=body)
        return self.expect(answer, client.url(path), ok=ok)

    def expect(self, answer: Answer, url: str, *, ok: tuple[int, ...] = (200,)) -> Answer:
        """``answer`` if its status is one of ``ok``; else raises :meth:`unavailable`."""
        if answer.status in ok:
            return answer
        raise self.unavailable(answer, url)

    def unavailable(self, answer: Answer, url: str) -> MetadataUnavailable:
        """The error for an HTTP status, worded from the service's hints. Its details carry the
        status: that one document is unavailable, not the whole service."""
        m = self.metadata
        why = m.hints.get(answer.status) or m.other_status.format(status=answer.status)
        return MetadataUnavailable(
            f"{m.service} at {url} {why}", details={"endpoint": url, "status": answer.status}
        )

    def unreadable(self, url: str, exc: Exception) -> MetadataUnavailable:
        """The error for an answer that is not the documented shape: an error, never "none"."""
        return MetadataUnavailable(
            f"{self.metadata.service} at {url} answered something unreadable: {exc}; retrying",
            details={"endpoint": url},
        )

    # --- notices -------------------------------------------------------------------------------

    def local_deadline(self, stated: float, answer: Answer) -> float:
        """A time in the service's clock (from ``answer``, by its ``Date``) -> this machine's.

        A skewed local clock still counts down the right number of seconds; the skew is logged
        once, since fixing the clock is the operator's to do. A ``Date`` more than
        :data:`MAX_SKEW_S` away is a bad header, not a skewed clock: it moves nothing (a
        hostile or broken service could otherwise put a 120 s notice 57 years away). A time
        more than :data:`PLAUSIBLE_S` from now is no notice this machine can have: it raises
        :class:`ValueError` (the document is malformed), never a notice for 1970 or 9999.
        """
        now = self.clock.now()
        skew = skew_s(answer, now)
        if abs(skew) > MAX_SKEW_S:
            if not self._skew_logged:
                self._skew_logged = True
                self.log.warning(
                    "%s' Date header is %.0f s away from this machine's clock, more than %.0f s:"
                    " taken as a bad header, not a skewed clock; notice times are read as stated",
                    self.metadata.service,
                    skew,
                    MAX_SKEW_S,
                )
            skew = 0.0
        elif skew and not self._skew_logged:
            self._skew_logged = True
            self.log.warning(
                "this machine's clock differs from %s' by %.1f s; notice deadlines are "
                "converted to this machine's clock (fix the clock: chrony/NTP)",
                self.metadata.service,
                -skew,
            )
        local = stated - skew
        if not now - PLAUSIBLE_S <= local <= now + PLAUSIBLE_S:
            raise ValueError(
                f"a notice time of {_utc(stated)} is more than a day from this machine's clock "
                f"({_utc(now)}): no notice this machine can have"
            )
        return max(0.0, local)

    def notice(
        self,
        notice_id: str,
        kind: NoticeKind,
        deadline: float,
        raw: Mapping[str, Any],
        *,
        seen_at: float | None = None,
    ) -> Notice:
        """A notice of this source, seen now unless ``seen_at`` says when."""
        return Notice(
            id=notice_id,
            source=self.name,
            provider=self.metadata.provider,
            kind=kind,
            deadline=deadline,
            seen_at=self.clock.now() if seen_at is None else seen_at,
            raw=raw,
        )

    def report_once(self, key: str, notice: Notice, *, why: str = "") -> list[Notice]:
        """``[notice]`` the first time ``key`` is reported, ``[]`` while it stands."""
        if key in self._reported:
            return []
        self._reported[key] = notice
        self.log.warning(
            "%s notice %s%s: deadline in %.0f s",
            notice.kind,
            notice.id,
            f" ({why})" if why else "",
            notice.deadline - notice.seen_at,
        )
        return [notice]

    def withdraw_once(self, key: str, *, why: str) -> list[Notice]:
        """The withdrawal of the notice reported under ``key``, once; ``[]`` if there is none."""
        notice = self._reported.get(key)
        if notice is None or notice.cancelled:
            return []
        withdrawn = notice.cancel()
        if self.remember_withdrawn:
            self._reported[key] = withdrawn
        else:
            del self._reported[key]
        self.log.warning("%s notice %s withdrawn: %s", notice.kind, notice.id, why)
        return [withdrawn]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(override={self.override!r})"


def _utc(at: float) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))
    except (OverflowError, OSError, ValueError):
        return repr(at)
