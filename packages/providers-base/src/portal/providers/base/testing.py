"""A small scriptable HTTP server on 127.0.0.1, the base of the providers' conformance fakes.

No emulator exists for the clouds' notice endpoints (AWS IMDS spot paths, GCP metadata, Azure
Scheduled Events), so each provider ships a fake written from the documented protocol. They share
this base: a real :class:`~http.server.ThreadingHTTPServer` on a free loopback port (real sockets,
so clients are tested with their real timeouts, keep-alive and error paths), a request log, and
faults a test injects: delays, status codes, malformed bodies, dropped connections, and a server
that stops answering. A subclass implements :meth:`FakeHTTPServer.respond`; a hanging response
waits with :meth:`FakeHTTPServer.wait_for`, which also wakes when the server closes so a test never
leaves a thread or socket behind (pytest runs with ``filterwarnings=error``)::

    class Hello(FakeHTTPServer):
        def respond(self, request):
            return Reply(200, b"hello")

    with Hello() as fake:
        fake.fail_next(503)
        ...  # point the client at fake.url
"""

from __future__ import annotations

import contextlib
import email.utils
import http.server
import logging
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Self

import attrs

__all__ = ["FakeHTTPServer", "Fault", "RecordedRequest", "Reply", "loopback_only"]

log = logging.getLogger("portal.testing.http_fake")


@attrs.frozen(kw_only=True)
class RecordedRequest:
    """One request as the fake received it."""

    method: str
    path: str  # without the query string
    query: Mapping[str, str]  # last value of each parameter
    headers: Mapping[str, str]  # names lower-cased
    body: bytes
    at: float  # time.monotonic() on arrival

    def header(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name.lower(), default)


@attrs.frozen
class Reply:
    """What the fake answers: a status, a body and headers (``Content-Length`` is added)."""

    status: int
    body: bytes = b""
    headers: Mapping[str, str] = attrs.field(factory=dict)
    content_type: str = "text/plain"


@attrs.define(kw_only=True)
class Fault:
    """A scripted misbehaviour for the next ``times`` requests whose path starts with ``path``.

    ``kind`` is ``status`` (answer ``reply`` instead of the real answer), ``delay`` (wait
    ``seconds``, then answer normally), ``drop`` (close the connection without answering) or
    ``truncate`` (announce a longer body than sent, then close).
    """

    kind: str
    path: str | None = None
    times: int = 1
    seconds: float = 0.0
    reply: Reply | None = None

    def matches(self, request: RecordedRequest) -> bool:
        return self.times > 0 and (self.path is None or request.path.startswith(self.path))


class _Dropped(Exception):
    """Raised inside a handler to close the connection without answering."""


class _Server(http.server.ThreadingHTTPServer):
    # Joined on close (not daemon threads) so no handler outlives the fake with an open socket.
    daemon_threads = False
    block_on_close = True
    allow_reuse_address = True

    def __init__(self, fake: FakeHTTPServer) -> None:
        self.fake = fake
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that times out or closes a keep-alive connection is normal here, not a crash.
        log.debug("connection from %s ended with an error", client_address, exc_info=True)

    def unblock_connections(self) -> None:
        """Wake handler threads blocked reading an idle keep-alive connection."""
        with self._open_lock:
            sockets = list(self._open)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the real metadata services allow
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes; without this, Nagle's algorithm and the
        # client's delayed ACK add ~40 ms to every answer, which would hide real latencies.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def handle(self) -> None:
        # As the base class, but a closing fake stops serving a keep-alive connection at once.
        self.close_connection = True
        self.handle_one_request()
        while not self.close_connection and not self.server.fake.closing:
            self.handle_one_request()

    def _handle(self) -> None:
        self.server.fake._dispatch(self)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


class FakeHTTPServer:
    """Base of a scriptable fake HTTP service on 127.0.0.1 (a free port, chosen at start).

    Use it as a context manager or call :meth:`start` / :meth:`close`. ``lock`` guards the fake's
    state; call :meth:`changed` after changing it so hanging requests re-check their condition.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._cond = threading.Condition(self.lock)
        self._faults: list[Fault] = []
        self._requests: list[RecordedRequest] = []
        self._answering = True
        self._closing = False
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- what a subclass implements ---------------------------------------------------------

    def respond(self, request: RecordedRequest) -> Reply:
        """The real answer to ``request`` (faults are applied before this is called)."""
        raise NotImplementedError

    def extra_headers(self, request: RecordedRequest) -> Mapping[str, str]:
        """Headers added to every answer (``Date`` by default, from :meth:`now`)."""
        return {"Date": email.utils.formatdate(self.now(), usegmt=True)}

    def now(self) -> float:
        """The fake service's wall clock (a subclass may skew it to test clock skew)."""
        return time.time()

    # --- life cycle ---------------------------------------------------------------------------

    def start(self) -> Self:
        if self._server is not None:
            return self
        self._closing = False
        self._server = _Server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"{type(self).__name__}-serve",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving, wake every hanging request, close every socket. Idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        with self._cond:
            self._closing = True
            self._answering = True
            self._cond.notify_all()
        server.shutdown()
        server.unblock_connections()
        server.server_close()  # joins the handler threads
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError(f"{type(self).__name__} is not started: use it in a with block")
        return int(self._server.server_address[1])

    @property
    def host(self) -> str:
        """``127.0.0.1:PORT``, the form ``GCE_METADATA_HOST`` takes."""
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, the form most endpoint overrides take."""
        return f"http://{self.host}"

    # --- request log --------------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        with self.lock:
            return list(self._requests)

    def count(self, path_prefix: str = "", method: str | None = None) -> int:
        """How many requests arrived for paths starting with ``path_prefix``."""
        return sum(
            1
            for r in self.requests
            if r.path.startswith(path_prefix) and (method is None or r.method == method)
        )

    def clear_requests(self) -> None:
        with self.lock:
            self._requests.clear()

    # --- faults -------------------------------------------------------------------------------

    def add_fault(self, fault: Fault) -> Fault:
        with self.lock:
            self._faults.append(fault)
        return fault

    def fail_next(
        self,
        status: int = 503,
        *,
        times: int = 1,
        path: str | None = None,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
    ) -> Fault:
        """Answer the next ``times`` matching requests with ``status`` instead of the real answer."""
        reply = Reply(status, body, dict(headers or {}))
        return self.add_fault(Fault(kind="status", path=path, times=times, reply=reply))

    def malform_next(
        self,
        body: bytes,
        *,
        status: int = 200,
        content_type: str = "text/html",
        times: int = 1,
        path: str | None = None,
    ) -> Fault:
        """Answer the next matching requests with ``body`` (garbage, truncated JSON, HTML...)."""
        reply = Reply(status, body, {}, content_type)
        return self.add_fault(Fault(kind="status", path=path, times=times, reply=reply))

    def delay_next(self, seconds: float, *, times: int = 1, path: str | None = None) -> Fault:
        """Wait ``seconds`` before answering the next matching requests (a slow service)."""
        return self.add_fault(Fault(kind="delay", path=path, times=times, seconds=seconds))

    def drop_next(self, *, times: int = 1, path: str | None = None) -> Fault:
        """Close the connection of the next matching requests without answering."""
        return self.add_fault(Fault(kind="drop", path=path, times=times))

    def truncate_next(self, *, times: int = 1, path: str | None = None) -> Fault:
        """Announce the real body's length but send only half of it, then close."""
        return self.add_fault(Fault(kind="truncate", path=path, times=times))

    def stop_answering(self) -> None:
        """Accept connections but answer nothing until :meth:`resume_answering` (or close)."""
        with self._cond:
            self._answering = False

    def resume_answering(self) -> None:
        with self._cond:
            self._answering = True
            self._cond.notify_all()

    def clear_faults(self) -> None:
        with self.lock:
            self._faults.clear()

    # --- helpers for subclasses -----------------------------------------------------------------

    def changed(self) -> None:
        """Tell hanging requests that the state changed. Call with or without ``lock`` held."""
        with self._cond:
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``predicate()`` (checked under ``lock``) or ``timeout_s`` passes, or the
        server closes. Returns the predicate's last value."""
        end = time.monotonic() + timeout_s
        with self._cond:
            while not predicate():
                left = end - time.monotonic()
                if left <= 0 or self._closing:
                    return predicate()
                self._cond.wait(min(left, 0.5))
            return True

    @property
    def closing(self) -> bool:
        return self._closing

    # --- dispatch -------------------------------------------------------------------------------

    def _take_fault(self, request: RecordedRequest) -> Fault | None:
        with self.lock:
            for fault in self._faults:
                if fault.matches(request):
                    fault.times -= 1
                    if fault.times <= 0:
                        self._faults.remove(fault)
                    return fault
        return None

    def _record(self, handler: _Handler) -> RecordedRequest:
        parsed = urllib.parse.urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length > 0 else b""
        request = RecordedRequest(
            method=handler.command,
            path=urllib.parse.unquote(parsed.path),
            query=dict(urllib.parse.parse_qsl(parsed.query, keep_blank_values=True)),
            headers={k.lower(): v for k, v in handler.headers.items()},
            body=body,
            at=time.monotonic(),
        )
        with self.lock:
            self._requests.append(request)
        return request

    def _dispatch(self, handler: _Handler) -> None:
        request = self._record(handler)
        with self._cond:
            while not self._answering and not self._closing:
                self._cond.wait(0.5)
        if self._closing:
            handler.close_connection = True
            return
        fault = self._take_fault(request)
        try:
            if fault is not None and fault.kind == "drop":
                raise _Dropped
            if fault is not None and fault.kind == "delay":
                self.wait_for(lambda: False, fault.seconds)
            if fault is not None and fault.kind == "status" and fault.reply is not None:
                reply = fault.reply
            else:
                reply = self.respond(request)
        except _Dropped:
            handler.close_connection = True
            return
        if self._closing:
            handler.close_connection = True
            return
        self._send(handler, request, reply, truncate=fault is not None and fault.kind == "truncate")

    def _send(
        self, handler: _Handler, request: RecordedRequest, reply: Reply, *, truncate: bool
    ) -> None:
        body = b"" if request.method == "HEAD" else reply.body
        try:
            handler.send_response(reply.status)
            headers = {**self.extra_headers(request), **reply.headers}
            headers.setdefault("Content-Type", reply.content_type)
            for name, value in headers.items():
                handler.send_header(name, value)
            handler.send_header("Content-Length", str(len(reply.body)))
            handler.end_headers()
            if truncate:
                handler.wfile.write(body[: len(body) // 2])
                handler.close_connection = True
            else:
                handler.wfile.write(body)
        except OSError:  # the client went away (it timed out): nothing to answer
            handler.close_connection = True


_LOOPBACK = ("127.", "::1", "localhost")


@contextlib.contextmanager
def loopback_only() -> Iterator[None]:
    """Refuse every connection that is not to a loopback address while the block runs.

    A safety net for tests of metadata clients: a bug that falls back to the real metadata
    address (169.254.169.254, metadata.google.internal) fails the test instead of sending a packet.
    """
    original = socket.socket.connect

    def guarded(sock: socket.socket, address: Any) -> None:
        host = address[0] if isinstance(address, tuple) else str(address)
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not str(host).startswith(_LOOPBACK):
            raise ConnectionRefusedError(f"test guard: no connections to {host!r} (loopback only)")
        original(sock, address)

    original_lookup = socket.getaddrinfo

    def guarded_lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
        # A name lookup would itself send a packet to the resolver (metadata.google.internal).
        if host is not None and not str(host).startswith(_LOOPBACK):
            raise socket.gaierror(f"test guard: no name lookups of {host!r} (loopback only)")
        return original_lookup(host, *args, **kwargs)

    socket.socket.connect = guarded  # type: ignore[method-assign,assignment]
    socket.getaddrinfo = guarded_lookup
    try:
        yield
    finally:
        socket.socket.connect = original  # type: ignore[method-assign]
        socket.getaddrinfo = original_lookup
