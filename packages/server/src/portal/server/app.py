"""The HTTP API (v1) over one control-plane store: a Starlette app.

Every route mirrors one :class:`~portal.control.store.ControlStore` method and speaks the wire
types of :mod:`portal.control.api`; ``docs/control-plane-api.md`` lists them. Every route but
``/v1/health`` needs a valid token (``Authorization: Bearer ...``): there are no anonymous
reads or writes. Each write is logged with the user whose token made it.

Jobs are owned: the server records who created each one (:mod:`portal.server.owners`, beside its
tokens, apart from the store), and a ``user`` token sees and changes only its own jobs (another's
is answered as not found: a job's existence is not told to others); an ``admin`` token sees every
job; a job token its one job. A job made before owners were recorded is an admin's.

The store's calls block (SQLite, psycopg), so each runs in Starlette's thread pool; both stores
keep one connection per thread, and their own locking keeps concurrent requests safe.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any, TypeVar

import msgspec
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from portal.control import api
from portal.control.store import ControlStore, JobNotFoundError
from portal.core.domain import AttemptState, Event, Job, JobState, is_job_id
from portal.core.errors import InvalidArgumentError, PortalError
from portal.server.owners import Owners
from portal.server.tokens import Principal, TokenFile

__all__ = ["build_app"]

log = logging.getLogger("portal.server")

T = TypeVar("T")
_Handler = Callable[[Request], Awaitable[msgspec.Struct | None]]

_ENCODER = msgspec.json.Encoder()
_DECODERS: dict[type[Any], msgspec.json.Decoder[Any]] = {}
_WAY_IN = (
    "set PORTAL_TOKEN to a token from `portal server token create USER` (run where the server runs)"
)

#: HTTP status of each refusal, by its stable code; other input errors are 400, the rest 500.
_STATUS = {
    "JOB_NOT_FOUND": 404,
    "NOT_FOUND": 404,
    "METHOD_NOT_ALLOWED": 405,
    "JOB_STATE_CONFLICT": 409,
    "UNAUTHORIZED": 401,
    "REQUEST_TOO_LARGE": 413,
    "CONTROL_DB_UNAVAILABLE": 503,
    "CONTROL_PLANE_BUSY": 503,
    "RATE_LIMITED": 429,
}

#: The owners' record, beside the tokens file.
OWNERS_NAME = "server-owners.db"

#: Requests a second each user may send, on average (bursts of ten times that, taken at once): a
#: node reports a few a second; a fleet of a user's jobs, a few hundred at a start.
RATE_PER_S = 100.0


class _RateLimit:
    """A token bucket per user: ``rate`` requests a second on average, ``burst`` at once."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = float(burst)
        self._buckets: dict[str, tuple[float, float]] = {}  # user -> (tokens, at)
        self._lock = threading.Lock()

    def wait_s(self, user: str) -> float:
        """0 when ``user`` may go on now (one token taken); else the seconds until they may."""
        if self.rate <= 0:
            return 0.0
        now = time.monotonic()
        with self._lock:
            tokens, at = self._buckets.get(user, (self.burst, now))
            tokens = min(self.burst, tokens + (now - at) * self.rate)
            if tokens >= 1.0:
                self._buckets[user] = (tokens - 1.0, now)
                return 0.0
            self._buckets[user] = (tokens, now)
            return (1.0 - tokens) / self.rate


def _job_param(request: Request, name: str) -> str:
    """A job id (or name) from the path, held to the store's rule before anything uses it."""
    value = request.path_params[name]
    if request.scope.get("path", "").endswith("\n"):  # a route's "$" matched before it
        value += "\n"
    if not is_job_id(value):
        raise InvalidArgumentError(
            f"{request.method} {request.url.path}: {value!r} is not a job id or name (1-128 "
            "letters, digits, '.', '_' or '-', starting with a letter or digit, without '..')",
            details={"parameter": name, "value": value},
        )
    return str(value)


class _RouteNotFoundError(InvalidArgumentError):
    code = "NOT_FOUND"


class _MethodNotAllowedError(InvalidArgumentError):
    code = "METHOD_NOT_ALLOWED"


class _InternalError(PortalError):
    code = "CONTROL_PLANE_INTERNAL"


class _TooLargeError(InvalidArgumentError):
    code = "REQUEST_TOO_LARGE"


#: The largest request body the service takes: an event, a job or an attempt is a few kB; a
#: larger body is refused before it is read whole (one client must not fill the server).
MAX_BODY_BYTES = 1 << 20


def _too_large(request: Request, size: int) -> _TooLargeError:
    return _TooLargeError(
        f"the body of {request.method} {request.url.path} is {size} bytes or more, over the "
        f"control plane's limit of {MAX_BODY_BYTES} bytes: an event's message and data are "
        "meant to be short (put large output in the job's logs)",
        details={"limit": MAX_BODY_BYTES},
    )


def _decoder(kind: type[T]) -> msgspec.json.Decoder[T]:
    found = _DECODERS.get(kind)
    if found is None:
        found = _DECODERS[kind] = msgspec.json.Decoder(kind)
    return found


def _json(body: msgspec.Struct | None, status: int = 200) -> Response:
    if body is None:
        return Response(status_code=204)
    return Response(_ENCODER.encode(body), status_code=status, media_type="application/json")


def _error(exc: PortalError, headers: dict[str, str] | None = None) -> Response:
    status = _STATUS.get(exc.code, 400 if isinstance(exc, InvalidArgumentError) else 500)
    return Response(
        _ENCODER.encode(api.error_body(exc)),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


def _busy_or_internal(exc: Exception) -> PortalError:
    """A store's own exception (not a refusal of Portal's) as the error a client can act on."""
    name = type(exc).__name__
    if (isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)) or (
        name in ("LockNotAvailable", "QueryCanceled")
    ):
        return api.ControlPlaneBusyError(
            f"the control plane's store is busy (another writer held it for longer than the "
            f"server's busy timeout: {exc}): try again",
            details={"error": name},
        )
    return _InternalError(
        f"the control-plane server failed ({name}: {exc}); its log has the traceback",
        details={"error": name},
    )


def _job_state(text: str) -> JobState:
    try:
        return JobState(text)
    except ValueError:
        raise InvalidArgumentError(
            f"unknown job state {text!r}: expected one of {', '.join(s.value for s in JobState)}",
            details={"state": text},
        ) from None


def _attempt_state(text: str) -> AttemptState:
    try:
        return AttemptState(text)
    except ValueError:
        raise InvalidArgumentError(
            f"unknown attempt state {text!r}: expected one of "
            f"{', '.join(s.value for s in AttemptState)}",
            details={"state": text},
        ) from None


def _server_version() -> str:
    try:
        return version("portal-server")
    except PackageNotFoundError:  # run from a source tree
        return "unknown"


class _Api:
    """The handlers: each reads its request, calls the store in a worker thread, answers."""

    def __init__(
        self,
        store: ControlStore,
        tokens: TokenFile,
        store_kind: str,
        limit: _RateLimit,
        owners: Owners,
    ) -> None:
        self.store = store
        self.tokens = tokens
        self.store_kind = store_kind
        self.limit = limit
        self.owners = owners

    # --- ownership ----------------------------------------------------------------------------

    def _mine(self, who: Principal, job: Job) -> bool:
        if who.job is not None and job.id != who.job:
            return False  # a job token: that one job only
        return who.admin or self.owners.owner_of(job.id) == who.user

    def _own_job(self, request: Request, name: str) -> str:
        """The job id a path names, once the request's principal may use it (in a worker)."""
        ref = _job_param(request, name)
        who: Principal = request.state.principal
        try:
            job = self.store.get_job(ref)
        except JobNotFoundError:
            return ref  # the store's own call refuses it, in its own words
        if not self._mine(who, job):
            raise JobNotFoundError(
                f"no job {ref!r} among {who.user}'s: a job is seen and changed by the user who "
                "created it (and by admins)",
                details={"job": ref},
            )
        return job.id

    async def _job_id(self, request: Request, name: str = "job") -> str:
        return await self._call(self._own_job, request, name)

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await run_in_threadpool(fn, *args, **kwargs)

    @staticmethod
    async def _body(request: Request, kind: type[T]) -> T:
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            raise _too_large(request, int(declared))
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():  # counted as it comes: a body may not say its size
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise _too_large(request, size)
            chunks.append(chunk)
        data = b"".join(chunks)
        try:
            return _decoder(kind).decode(data)
        except msgspec.DecodeError as why:  # ValidationError is one too
            raise InvalidArgumentError(
                f"the body of {request.method} {request.url.path} is not a valid "
                f"{kind.__name__} ({why}): see docs/control-plane-api.md",
                details={"path": request.url.path},
            ) from None

    @staticmethod
    def _query_number(request: Request, name: str, kind: type[T], default: T) -> T:
        raw = request.query_params.get(name)
        if raw is None:
            return default
        number: float | None
        try:
            number = float(raw) if kind is float else int(raw)
        except ValueError:
            number = None
        if number is None or not -(2**63) <= number < 2**63 or number != number:  # NaN too
            raise InvalidArgumentError(
                f"query parameter {name}={raw!r} of {request.url.path} is not a number the "
                "control plane keeps (a 64-bit integer, or a finite time)",
                details={"parameter": name, "value": raw[:100]},
            ) from None
        return number  # type: ignore[return-value]

    # --- service ------------------------------------------------------------------------------

    async def health(self, request: Request) -> msgspec.Struct:
        return api.Health(ok=True)

    async def version(self, request: Request) -> msgspec.Struct:
        return api.Version(
            api=api.API_VERSION,
            revision=api.API_REVISION,
            server=_server_version(),
            store=self.store_kind,
        )

    # --- jobs ---------------------------------------------------------------------------------

    async def create_job(self, request: Request) -> msgspec.Struct:
        wire = await self._body(request, api.JobWire)
        try:
            job = wire.to_job()
        except (ValueError, TypeError) as why:
            raise InvalidArgumentError(f"the job is not valid: {why}") from None
        who: Principal = request.state.principal
        if who.job is not None:
            raise InvalidArgumentError(
                f"the token of {who.user} is held to job {who.job}: it creates no job (use "
                f"{who.user}'s own token)",
                details={"job": who.job},
            )
        return api.JobWire.of(await self._call(self._create_owned, job, who.user))

    def _create_owned(self, job: Job, user: str) -> Job:
        created = self.store.create_job(job)
        self.owners.record(created.id, user)
        return created

    async def list_jobs(self, request: Request) -> msgspec.Struct:
        who: Principal = request.state.principal

        def mine() -> list[Job]:
            return [j for j in self.store.list_jobs() if self._mine(who, j)]

        return api.JobList(jobs=[api.JobWire.of(j) for j in await self._call(mine)])

    async def get_job(self, request: Request) -> msgspec.Struct:
        job_id = await self._job_id(request, "ref")
        return api.JobWire.of(await self._call(self.store.get_job, job_id))

    async def set_state(self, request: Request) -> msgspec.Struct:
        body = await self._body(request, api.SetStateRequest)
        expect = None if body.expect is None else [_job_state(s) for s in body.expect]
        job = await self._call(
            self.store.set_job_state,
            await self._job_id(request),
            _job_state(body.state),
            expect=expect,
        )
        return api.JobWire.of(job)

    async def heard(self, request: Request) -> None:
        body = await self._body(request, api.HeardRequest)
        await self._call(self.store.heard, await self._job_id(request), body.at)

    async def last_heard(self, request: Request) -> msgspec.Struct:
        return api.LastHeard(
            at=await self._call(self.store.last_heard, await self._job_id(request))
        )

    # --- attempts -----------------------------------------------------------------------------

    async def start_attempt(self, request: Request) -> msgspec.Struct:
        body = await self._body(request, api.StartAttemptRequest)
        attempt = await self._call(
            self.store.start_attempt,
            await self._job_id(request),
            machine=body.machine,
            at=body.at,
            resumed_from=body.resumed_from,
        )
        return api.AttemptWire.of(attempt)

    async def end_attempt(self, request: Request) -> msgspec.Struct:
        body = await self._body(request, api.EndAttemptRequest)
        number = request.path_params["number"]
        if not 0 < number < 2**31:
            raise InvalidArgumentError(
                f"{request.url.path}: attempt {number} is no attempt number (1 and up)",
                details={"attempt": number},
            )
        attempt = await self._call(
            self.store.end_attempt,
            await self._job_id(request),
            number,
            state=_attempt_state(body.state),
            at=body.at,
            exit_code=body.exit_code,
        )
        return api.AttemptWire.of(attempt)

    async def attempts(self, request: Request) -> msgspec.Struct:
        found = await self._call(self.store.attempts, await self._job_id(request))
        return api.AttemptList(attempts=[api.AttemptWire.of(a) for a in found])

    # --- events -------------------------------------------------------------------------------

    async def append_event(self, request: Request) -> msgspec.Struct:
        body = await self._body(request, api.NewEvent)
        event = Event(
            job_id=await self._job_id(request),
            at=body.at,
            kind=body.kind,
            message=body.message,
            data=body.data,
            id=body.id,
        )
        return api.Appended(seq=await self._call(self.store.append_event, event))

    async def events(self, request: Request) -> msgspec.Struct:
        after = self._query_number(request, "after", int, 0)
        found = await self._call(self.store.events, await self._job_id(request), after=after)
        return api.EventList(
            events=[
                api.SequencedEvent(seq=s, event=api.EventRecord.from_domain(e)) for s, e in found
            ]
        )

    # --- reclaims -----------------------------------------------------------------------------

    async def record_reclaim(self, request: Request) -> None:
        body = await self._body(request, api.ReclaimRequest)
        await self._call(self.store.record_reclaim, body.pool, body.at, body.machine)

    async def reclaims(self, request: Request) -> msgspec.Struct:
        since = self._query_number(request, "since", float, 0.0)
        found = await self._call(self.store.reclaims, since)
        return api.ReclaimList(reclaims=[api.ReclaimWire(pool=p, at=at) for p, at in found])

    # --- every route's wrapper: the token, the answer, the refusal ----------------------------

    def principal(self, request: Request) -> Principal:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise api.UnauthorizedError(
                f"the control plane refused {request.method} {request.url.path}: the request "
                f"has no token; {_WAY_IN}"
            )
        who = self.tokens.principal_of(token.strip())
        if who is None:
            raise api.UnauthorizedError(
                f"the control plane refused {request.method} {request.url.path}: its token is "
                f"unknown or revoked; {_WAY_IN}"
            )
        if who.expired_at is not None:
            when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(who.expired_at))
            raise api.UnauthorizedError(
                f"the control plane refused {request.method} {request.url.path}: the token of "
                f"{who.user} expired at {when}; ask for a new one (`portal server token create "
                f"{who.user} --expires 30d`, run where the server runs)"
            )
        return who

    def route(
        self, path: str, method: str, handler: _Handler, *, status: int = 200, open_: bool = False
    ) -> Route:
        async def endpoint(request: Request) -> Response:
            user = "-"
            try:
                if not open_:
                    request.state.principal = who = self.principal(request)
                    user = who.user
                    wait = self.limit.wait_s(user)
                    if wait > 0:
                        return _error(
                            api.RateLimitedError(
                                f"{user} sent more than {self.limit.rate:g} requests a second "
                                f"(bursts of {self.limit.burst:g}) to the control plane: ask "
                                f"again in {wait:.2f} s (the server's --rate-limit sets it)",
                                details={"retry_after_s": wait},
                            ),
                            {"Retry-After": str(max(1, math.ceil(wait)))},
                        )
                answer = _json(await handler(request), status)
            except api.UnauthorizedError as exc:
                log.warning("refused %s %s: %s", request.method, request.url.path, exc.message)
                return _error(exc, {"WWW-Authenticate": "Bearer"})
            except PortalError as exc:
                answer = _error(exc)
            except Exception as exc:
                failure = _database_failure(exc) or _busy_or_internal(exc)
                if isinstance(failure, _InternalError):
                    log.exception("%s %s failed", request.method, request.url.path)
                answer = _error(failure)
            if method != "GET":
                log.info("%s %s %s -> %d", user, method, request.url.path, answer.status_code)
            return answer

        return Route(path, endpoint, methods=[method], name=f"{method} {path}")


def _database_failure(exc: Exception) -> PortalError | None:
    """psycopg lost its server mid-request: the database is unavailable, not the service."""
    if type(exc).__module__.startswith("psycopg") and type(exc).__name__ == "OperationalError":
        from portal.control.postgres import ControlDatabaseError

        detail = " ".join(str(exc).split())
        return ControlDatabaseError(
            f"the control plane's database is unavailable ({detail}): try again once it is back",
            details={"error": type(exc).__name__},
        )
    return None


async def _not_found(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        return _error(
            _MethodNotAllowedError(
                f"{request.method} is not an operation of {request.url.path}: see "
                "docs/control-plane-api.md for each path's methods",
                details={"path": request.url.path, "method": request.method},
            )
        )
    return _error(
        _RouteNotFoundError(
            f"no API path {request.url.path}: this server speaks {api.PREFIX} (see "
            "docs/control-plane-api.md); a newer client may need a newer `portal server`",
            details={"path": request.url.path},
        )
    )


def build_app(
    store: ControlStore,
    tokens: TokenFile,
    *,
    store_kind: str = "sqlite",
    rate_per_s: float = RATE_PER_S,
    burst: int | None = None,
    owners: Owners | None = None,
) -> Starlette:
    """The API over ``store``, open to the holders of ``tokens``, each user held to
    ``rate_per_s`` requests a second (bursts of ``burst``, default ten times that; 0: no
    limit)."""
    bucket = burst if burst is not None else max(1, math.ceil(rate_per_s * 10))
    owned = owners or Owners(tokens.path.with_name(OWNERS_NAME))
    a = _Api(store, tokens, store_kind, _RateLimit(rate_per_s, bucket), owned)
    v = api.PREFIX
    job = f"{v}/jobs/{{job:path}}"
    routes = [
        a.route(api.HEALTH_PATH, "GET", a.health, open_=True),
        a.route(f"{v}/version", "GET", a.version),
        a.route(f"{v}/jobs", "GET", a.list_jobs),
        a.route(f"{v}/jobs", "POST", a.create_job, status=201),
        # Routes under a job before the job itself: a job reference may contain anything.
        a.route(f"{job}/state", "POST", a.set_state),
        a.route(f"{job}/heard", "GET", a.last_heard),
        a.route(f"{job}/heard", "POST", a.heard),
        a.route(f"{job}/attempts/{{number:int}}/end", "POST", a.end_attempt),
        a.route(f"{job}/attempts", "GET", a.attempts),
        a.route(f"{job}/attempts", "POST", a.start_attempt, status=201),
        a.route(f"{job}/events", "GET", a.events),
        a.route(f"{job}/events", "POST", a.append_event, status=201),
        a.route(f"{v}/jobs/{{ref:path}}", "GET", a.get_job),
        a.route(f"{v}/reclaims", "GET", a.reclaims),
        a.route(f"{v}/reclaims", "POST", a.record_reclaim),
    ]
    return Starlette(routes=routes, exception_handlers={404: _not_found, 405: _not_found})
