"""The HTTP client every metadata notice source talks through, its answers and its one error.

Standard library only (and attrs, which portal-spot-core brings): importing it costs nothing heavy.

Why not urllib: it honours ``HTTP_PROXY`` (Azure rejects proxied requests, and a proxy must never
see metadata), opens a connection per request (polling once a second should not), and its
timeouts bound each socket read, not the whole answer (a service dripping one byte per second
would hang the poll). :class:`MetadataHTTP` keeps one keep-alive connection, bounds the whole
request, caps the body it reads, and turns every failure into one :class:`MetadataUnavailable`
naming the endpoint.
"""

from __future__ import annotations

import contextlib
import email.utils
import http.client
import socket
import threading
import time
import urllib.parse
from collections.abc import Mapping
from typing import ClassVar

import attrs

from portal.core.errors import InvalidSettingError, PortalError

__all__ = [
    "MAX_BODY_BYTES",
    "Answer",
    "MetadataHTTP",
    "MetadataUnavailable",
    "open_client",
    "parse_base_url",
    "skew_s",
]

#: Metadata answers are a few hundred bytes; anything far larger is not the service we expect.
MAX_BODY_BYTES = 256 * 1024
#: Clock differences below this are the ``Date`` header's 1 s resolution plus latency, not skew.
SKEW_THRESHOLD_S = 2.0


class MetadataUnavailable(PortalError):
    """A metadata endpoint could not be read (unreachable, timed out, refused, malformed).

    Raised from ``poll``: the caller keeps polling; a notice that appeared meanwhile is reported
    on the next successful poll.
    """

    code: ClassVar[str] = "NOTICE_ENDPOINT_UNAVAILABLE"


@attrs.frozen
class Answer:
    """A metadata service's answer: status, body (capped), headers with lower-cased names."""

    status: int
    body: bytes
    headers: Mapping[str, str]

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace").strip()

    def server_time(self) -> float | None:
        """The service's clock from its ``Date`` header, if it sent a valid one."""
        raw = self.header("date")
        if not raw:
            return None
        try:
            return email.utils.parsedate_to_datetime(raw).timestamp()
        except (TypeError, ValueError, IndexError, OverflowError):
            return None


def skew_s(answer: Answer, local_now: float) -> float:
    """How far the service's clock is ahead of ours (0 when within the ``Date`` resolution).

    Deadlines the service states in its own clock are converted to this machine's clock by
    subtracting this, so a skewed local clock still counts down the right number of seconds.
    """
    server = answer.server_time()
    if server is None:
        return 0.0
    skew = server - local_now
    return skew if abs(skew) > SKEW_THRESHOLD_S else 0.0


def open_client(
    *,
    source: str,
    platform: str,
    on_platform: bool,
    override: str | None,
    override_env: str,
    default_endpoint: str,
    what: str,
    path_prefix: str = "",
    headers: Mapping[str, str] | None = None,
) -> MetadataHTTP:
    """A client for a provider's metadata service, refused unless this machine is on the
    platform (``on_platform``, from DMI) or an override points at a test endpoint: Portal never
    sends a packet to a metadata address it has no reason to believe is there."""
    if not on_platform and not override:
        raise PortalError(
            f"the {source} notice source is not on {platform} (DMI does not say so) and has no "
            f"override: it will not contact {what}. Set {override_env} to point at a test "
            "endpoint, or do not enable this source here"
        )
    setting = override_env if override else f"the default endpoint of {what}"
    host, port, prefix = parse_base_url(override or default_endpoint, setting=setting)
    return MetadataHTTP(host, port, prefix=prefix + path_prefix, what=what, headers=headers)


def parse_base_url(value: str, *, setting: str) -> tuple[str, int, str]:
    """``http://host[:port][/prefix]`` (or a bare ``host[:port]``) -> (host, port, prefix)."""
    text = value.strip()
    if "://" not in text:
        text = f"http://{text}"
    parts = urllib.parse.urlsplit(text)
    try:
        port = parts.port or 80
    except ValueError:
        port = -1
    if parts.scheme != "http" or not parts.hostname or port <= 0:
        raise InvalidSettingError(
            f"{setting}={value!r} is not a metadata endpoint: give http://HOST[:PORT] "
            "(metadata services speak plain HTTP on a link-local address; for tests, "
            "e.g. http://127.0.0.1:8999)"
        )
    return parts.hostname, port, parts.path.rstrip("/")


class MetadataHTTP:
    """One keep-alive HTTP connection to a metadata service, with whole-request deadlines.

    Not shared between threads, except :meth:`close`, which may be called from any thread to
    interrupt a request in progress (a hanging GET).
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        prefix: str = "",
        what: str,
        headers: Mapping[str, str] | None = None,
        connect_timeout_s: float = 1.0,
        max_body: int = MAX_BODY_BYTES,
    ) -> None:
        self.host = host
        self.port = port
        self.prefix = prefix
        self.what = what  # "AWS instance metadata (IMDS)", names the service in errors
        self.headers = dict(headers or {})
        self.connect_timeout_s = connect_timeout_s
        self.max_body = max_body
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()
        self._closed = False
        self.requests_sent = 0

    def url(self, path: str) -> str:
        where = self.host if self.port == 80 else f"{self.host}:{self.port}"
        return f"http://{where}{self.prefix}{path}"

    def request(
        self,
        method: str,
        path: str,
        *,
        timeout_s: float,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
    ) -> Answer:
        """Send one request and read the whole answer within ``timeout_s``.

        Raises :class:`MetadataUnavailable` for anything but an HTTP answer with a readable body
        (an HTTP error status is an :class:`Answer`, for the caller to judge).
        """
        all_headers = {**self.headers, **(headers or {})}
        with self._lock:
            if self._closed:
                raise MetadataUnavailable(f"{self.what} client is closed", details={})
            try:
                reused = self._conn is not None
                try:
                    return self._once(method, path, all_headers, body, timeout_s)
                except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                    if not reused or self._closed:
                        raise
                    # The service closed an idle keep-alive connection: one fresh attempt.
                    self._drop()
                    return self._once(method, path, all_headers, body, timeout_s)
            except MetadataUnavailable:
                self._drop()
                raise
            except (OSError, http.client.HTTPException) as exc:
                self._drop()
                raise self._error(method, path, exc, timeout_s) from exc
            finally:
                if self._closed:
                    self._drop()

    def _once(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes | None,
        timeout_s: float,
    ) -> Answer:
        deadline = time.monotonic() + timeout_s
        if self._conn is None:
            self._conn = http.client.HTTPConnection(
                self.host, self.port, timeout=min(self.connect_timeout_s, timeout_s)
            )
        conn = self._conn
        if conn.sock is None:
            conn.connect()
        assert conn.sock is not None
        conn.sock.settimeout(max(0.001, deadline - time.monotonic()))
        self.requests_sent += 1
        conn.request(method, f"{self.prefix}{path}", body=body, headers=dict(headers))
        response = conn.getresponse()
        length = response.getheader("Content-Length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            self._drop()
            raise MetadataUnavailable(
                f"{self.what} at {self.url(path)} answered {length} bytes, more than the "
                f"{self.max_body} a metadata answer can be: this is not the service expected "
                "(check the endpoint override)",
                details={"endpoint": self.url(path), "bytes": int(length)},
            )
        chunks: list[bytes] = []
        size = 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the answer did not arrive in time")
            conn.sock.settimeout(left)
            chunk = response.read1(min(65536, self.max_body + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > self.max_body:
                self._drop()
                raise MetadataUnavailable(
                    f"{self.what} at {self.url(path)} sent more than {self.max_body} bytes: "
                    "this is not the service expected (check the endpoint override)",
                    details={"endpoint": self.url(path)},
                )
        if length is not None and length.isdigit() and size < int(length):
            raise http.client.IncompleteRead(b"".join(chunks), int(length) - size)
        if response.will_close:
            self._drop()
        else:
            response.close()  # fully read: frees the connection for the next request
        return Answer(
            status=response.status,
            body=b"".join(chunks),
            headers={k.lower(): v for k, v in response.getheaders()},
        )

    def _error(
        self, method: str, path: str, exc: BaseException, timeout_s: float
    ) -> MetadataUnavailable:
        url = self.url(path)
        if self._closed:
            why = "the source was closed"
        elif isinstance(exc, TimeoutError | socket.timeout):
            why = f"no answer within {timeout_s:g} s"
        elif isinstance(exc, http.client.IncompleteRead):
            why = "the answer was cut short"
        elif isinstance(exc, ConnectionRefusedError):
            why = "connection refused"
        else:
            why = f"{type(exc).__name__}: {exc}"
        return MetadataUnavailable(
            f"{self.what} at {url} could not be read ({method}): {why}",
            details={"endpoint": url, "method": method, "reason": why},
        )

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def close(self) -> None:
        """Close the connection; from another thread, interrupts a request in progress."""
        self._closed = True
        conn = self._conn
        sock = conn.sock if conn is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if self._lock.acquire(blocking=False):
            try:
                self._drop()
            finally:
                self._lock.release()
