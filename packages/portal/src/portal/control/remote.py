"""The control plane as a service: :class:`HttpControlStore` speaks ``portal server``'s API (v1).

It implements :class:`~portal.control.store.ControlStore`, so the CLI, the node and the views
work unchanged when ``PORTAL_CONTROL_PLANE`` names a server. Only the standard library: the
CLI needs no HTTP package, and ``portal`` no server install.

- One keep-alive connection per thread (``http.client`` is not thread-safe), reopened once when
  the server closed an idle one; every connection is closed by :meth:`close`.
- The socket timeout is the store's busy timeout, so a node that allows 2 s for a report still
  gets its answer (or an error, and keeps the report in its backlog) within about 2 s.
- A refusal comes back as the same :class:`~portal.core.errors.PortalError` subclass, with the
  same message, as the embedded store raises (:func:`portal.control.api.error_from_body`).
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from collections.abc import Sequence
from typing import Any, TypeVar
from urllib.parse import quote, urlencode, urlsplit

import msgspec

from portal.control import api
from portal.core.domain import Attempt, AttemptState, Event, Job, JobState
from portal.core.errors import InvalidSettingError

__all__ = ["HttpControlStore"]

T = TypeVar("T")

#: Reopen a connection idle for longer than this instead of reusing it: well under the server's
#: keep-alive (``portal server`` keeps 60 s), so a request is rarely sent on a closing socket.
_IDLE_REOPEN_S = 20.0
#: Errors of a reused connection that the server closed before reading our request.
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)

_ENCODER = msgspec.json.Encoder()
_DECODERS: dict[type[Any], msgspec.json.Decoder[Any]] = {}


#: How long a rate-limited request waits before each of its next tries (at most: the server's
#: Retry-After is taken when shorter); then the refusal is raised.
_RATE_WAITS = (1.0, 2.0, 4.0)


def _decoder(kind: type[T]) -> msgspec.json.Decoder[T]:
    found = _DECODERS.get(kind)
    if found is None:
        found = _DECODERS[kind] = msgspec.json.Decoder(kind)
    return found


def _tls_context(ca_file: str | None) -> ssl.SSLContext:
    """Certificates checked against the system's CAs, or against ``ca_file`` only."""
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as why:
        raise InvalidSettingError(
            f"control_ca names {ca_file!r}, which is not a readable CA certificate "
            f"({getattr(why, 'strerror', None) or why}): set PORTAL_CONTROL_CA to the PEM "
            "certificate of the CA that signed the control plane's, or unset it to trust the "
            "system's CAs",
            details={"setting": "control_ca", "value": str(ca_file)},
        ) from None


class HttpControlStore:
    """A :class:`~portal.control.store.ControlStore` whose records live in ``portal server``."""

    def __init__(
        self, url: str, *, token: str | None, timeout: float = 30.0, ca_file: str | None = None
    ) -> None:
        """``url``: the server's base URL (``http://host:port``, optionally with a path prefix);
        ``token``: this user's token (``portal server token create USER``); ``timeout``: seconds
        to wait for a connection and for each answer; ``ca_file``: the CA certificate (PEM) an
        ``https://`` server's certificate is checked against (None: the system's CAs)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidSettingError(
                f"control plane URL {url!r} is not an http:// or https:// URL with a host: set "
                "PORTAL_CONTROL_PLANE to the server's address, e.g. http://127.0.0.1:8471",
                details={"setting": "control_plane", "value": url},
            )
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._https = parts.scheme == "https"
        self._tls = _tls_context(ca_file) if self._https else None
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/") + api.PREFIX
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._local = threading.local()
        self._all: list[http.client.HTTPConnection] = []
        self._all_lock = threading.Lock()

    # --- the wire -----------------------------------------------------------------------------

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection, and whether it was used before (and so may be stale)."""
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        last: float = getattr(self._local, "last", 0.0)
        if conn is not None and time.monotonic() - last > _IDLE_REOPEN_S:
            self._drop(conn)
            conn = None
        if conn is not None:
            return conn, True
        opened = (
            http.client.HTTPSConnection(
                self._host, self._port, timeout=self.timeout, context=self._tls
            )
            if self._tls is not None
            else http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)
        )
        self._local.conn = opened
        with self._all_lock:
            self._all.append(opened)
        return opened, False

    def _drop(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        self._local.conn = None
        with self._all_lock:
            if conn in self._all:
                self._all.remove(conn)

    def _request(
        self, method: str, path: str, answer: type[T] | None, body: Any = None
    ) -> T | None:
        payload = None if body is None else _ENCODER.encode(body)
        target = self._prefix + path
        waits = list(_RATE_WAITS)  # a rate-limited request is asked again after Retry-After
        retried_stale = False
        while True:
            conn, reused = self._connection()
            try:
                conn.request(method, target, body=payload, headers=self._headers)
                response = conn.getresponse()
                data = response.read()
            except _STALE as why:
                self._drop(conn)
                if reused and not retried_stale:
                    retried_stale = True
                    continue  # the server closed it while idle: the request never arrived
                raise self._unreachable(why) from None
            except (OSError, http.client.HTTPException) as why:
                self._drop(conn)
                raise self._unreachable(why) from None
            self._local.last = time.monotonic()
            if response.getheader("Connection", "").lower() == "close":
                self._drop(conn)
            if response.status == 429 and waits:
                cap = waits.pop(0)
                try:
                    wait = float(response.getheader("Retry-After", "") or cap)
                except ValueError:
                    wait = cap
                time.sleep(min(max(wait, 0.0), cap))
                continue
            return self._answer(method, target, response.status, data, answer)

    def _answer(
        self, method: str, target: str, status: int, data: bytes, answer: type[T] | None
    ) -> T | None:
        if status >= 400:
            try:
                body = _decoder(api.ErrorBody).decode(data)
            except msgspec.DecodeError:
                raise api.ControlPlaneUnavailableError(
                    f"the control plane at {self.url} answered {method} {target} with HTTP "
                    f"{status} and no Portal error: is PORTAL_CONTROL_PLANE the address of a "
                    "`portal server`?",
                    details={"url": self.url, "status": status},
                ) from None
            raise api.error_from_body(body)
        if answer is None:
            return None
        try:
            return _decoder(answer).decode(data)
        except msgspec.DecodeError as why:
            raise api.ControlPlaneUnavailableError(
                f"the control plane at {self.url} answered {method} {target} with a body this "
                f"Portal cannot read ({why}): is PORTAL_CONTROL_PLANE the address of a "
                "`portal server` of a compatible version?",
                details={"url": self.url},
            ) from None

    def _unreachable(self, why: BaseException) -> api.ControlPlaneUnavailableError:
        if isinstance(why, socket.timeout | TimeoutError):
            detail = f"no answer within {self.timeout:g} s"
        elif isinstance(why, ssl.SSLCertVerificationError):
            return api.ControlPlaneUnavailableError(
                f"the control plane at {self.url} has a certificate this machine does not "
                f"trust ({why.verify_message or why}): set PORTAL_CONTROL_CA (or control_ca in "
                "PORTAL_HOME/config.toml) to the certificate of the CA that signed it (PEM)",
                details={"url": self.url},
            )
        else:
            detail = str(why) or type(why).__name__
        return api.ControlPlaneUnavailableError(
            f"cannot reach the control plane at {self.url} ({detail}): start it with "
            "`portal server`, or fix PORTAL_CONTROL_PLANE (or control_plane in "
            "PORTAL_HOME/config.toml); unset both to use this machine's own store",
            details={"url": self.url},
        )

    def _get(self, path: str, answer: type[T]) -> T:
        result = self._request("GET", path, answer)
        assert result is not None
        return result

    def _post(self, path: str, body: Any, answer: type[T]) -> T:
        result = self._request("POST", path, answer, body)
        assert result is not None
        return result

    @staticmethod
    def _job_path(ref: str, *rest: str) -> str:
        return "/".join(["/jobs", quote(ref, safe=""), *rest])

    def close(self) -> None:
        """Close every connection this store opened, in any thread."""
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()

    # --- service information ------------------------------------------------------------------

    def version(self) -> api.Version:
        """What the server runs: API version and revision, its Portal version, its store."""
        return self._get("/version", api.Version)

    # --- jobs ---------------------------------------------------------------------------------

    def create_job(self, job: Job) -> Job:
        return self._post("/jobs", api.JobWire.of(job), api.JobWire).to_job()

    def get_job(self, ref: str) -> Job:
        return self._get(self._job_path(ref), api.JobWire).to_job()

    def list_jobs(self) -> list[Job]:
        return [w.to_job() for w in self._get("/jobs", api.JobList).jobs]

    def set_job_state(
        self, job_id: str, state: JobState, *, expect: Sequence[JobState] | None = None
    ) -> Job:
        request = api.SetStateRequest(
            state=str(state), expect=None if expect is None else [str(s) for s in expect]
        )
        return self._post(self._job_path(job_id, "state"), request, api.JobWire).to_job()

    def heard(self, job_id: str, at: float) -> None:
        self._request("POST", self._job_path(job_id, "heard"), None, api.HeardRequest(at=at))

    def last_heard(self, job_id: str) -> float | None:
        return self._get(self._job_path(job_id, "heard"), api.LastHeard).at

    # --- attempts -----------------------------------------------------------------------------

    def start_attempt(
        self, job_id: str, *, machine: str, at: float, resumed_from: str | None = None
    ) -> Attempt:
        request = api.StartAttemptRequest(machine=machine, at=at, resumed_from=resumed_from)
        return self._post(self._job_path(job_id, "attempts"), request, api.AttemptWire).to_attempt()

    def end_attempt(
        self, job_id: str, number: int, *, state: AttemptState, at: float, exit_code: int | None
    ) -> Attempt:
        request = api.EndAttemptRequest(state=str(state), at=at, exit_code=exit_code)
        path = self._job_path(job_id, "attempts", str(number), "end")
        return self._post(path, request, api.AttemptWire).to_attempt()

    def attempts(self, job_id: str) -> list[Attempt]:
        found = self._get(self._job_path(job_id, "attempts"), api.AttemptList)
        return [w.to_attempt() for w in found.attempts]

    # --- events -------------------------------------------------------------------------------

    def append_event(self, event: Event) -> int:
        request = api.NewEvent(
            at=event.at,
            kind=event.kind,
            message=api.fit_message(event.message),
            data=api.plain_data(event.data),
            id=event.id,
        )
        return self._post(self._job_path(event.job_id, "events"), request, api.Appended).seq

    def events(self, job_id: str, *, after: int = 0) -> list[tuple[int, Event]]:
        path = self._job_path(job_id, "events") + "?" + urlencode({"after": after})
        found = self._get(path, api.EventList)
        return [(e.seq, e.event.to_domain()) for e in found.events]

    # --- reclaims -----------------------------------------------------------------------------

    def record_reclaim(self, pool: str, at: float, machine: str) -> None:
        request = api.ReclaimRequest(pool=pool, at=at, machine=machine)
        self._request("POST", "/reclaims", None, request)

    def reclaims(self, since: float) -> list[tuple[str, float]]:
        found = self._get("/reclaims?" + urlencode({"since": repr(float(since))}), api.ReclaimList)
        return [(r.pool, r.at) for r in found.reclaims]
