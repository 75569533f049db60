"""The HTTP API (v1) over one control-plane store: a Starlette app.

Every route mirrors one :class:`~portal.control.store.ControlStore` method and speaks the wire
types of :mod:`portal.control.api`; ``docs/control-plane-api.md`` lists them. Every route but
``/v1/health`` needs a valid token (``Authorization: Bearer ...``): there are no anonymous
reads or writes. Each write is logged with the user whose token made it.

Jobs are owned: the server records who created each one (:mod:`portal.server.owners`, beside its
tokens, apart from the store), and a ``user`` token sees and changes only its own jobs (another's
is answered as not found: a job's existence is not told to others); an ``admin`` token sees every
job; a job token its one job. A job made before owners were recorded is an admin's. Reclaims are
read by everyone and steer every user's placements, so only an admin's token, or a job's token for
the machine its job ran on, records one.

Job names are each user's own (see :meth:`_Api._create_owned` for why they live in the owners'
record, not the store): a name is unique among its user's jobs, a name means the caller's own job
by that name, and a name shaped like a job id is refused.

Requests with a bad token are limited per source address and logged in aggregate
(:mod:`portal.server.failures`).

Event kinds starting ``server.`` are the server's own: no client writes one, none is read back.

The store's calls block (SQLite, psycopg), so each runs in Starlette's thread pool; both stores
keep one connection per thread, and their own locking keeps concurrent requests safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any, TypeVar

import attrs
import msgspec
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from portal.control import api
from portal.control.store import ControlStore, JobNotFoundError, name_taken
from portal.core.domain import AttemptState, Event, Job, JobState, is_job_id
from portal.core.errors import InvalidArgumentError, PortalError
from portal.server.buckets import TokenBuckets
from portal.server.failures import AUTH_FAILURES_PER_MIN, FailureLimit, FailureLog, source_of
from portal.server.owners import OWNERS_NAME, NameTakenError, Owned, Owners
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
    "FORBIDDEN": 403,
    "REQUEST_TOO_LARGE": 413,
    "CONTROL_DB_UNAVAILABLE": 503,
    "CONTROL_PLANE_BUSY": 503,
    "RATE_LIMITED": 429,
}

#: Requests a second each user may send, on average (bursts of ten times that, taken at once): a
#: node reports a few a second; a fleet of a user's jobs, a few hundred at a start.
RATE_PER_S = 100.0


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


#: The deepest an event's data may nest (an object or a list is one level; the data object is the
#: first): it is meant to be a few fields. A body of any route nested far deeper (50,000 levels)
#: must not exhaust the decoder's stack: msgspec stops near Python's recursion limit with
#: RecursionError, refused in the same words.
MAX_DEPTH = 64

#: Event kinds that only the server writes (``server.owner`` once recorded who made a job): a
#: client's would pass for the server's word, so none is taken, in any case, and none read back.
RESERVED_KIND_PREFIX = "server."

#: The shape of the ids Portal gives jobs (``j-`` and 10 hex digits: ``store.new_job_id``). Ids and
#: names share the JOB argument of every command, and an id wins over a name that spells it: a
#: name of this shape could come to mean another job (or be taken for one), so none is taken.
#: (``is_job_id`` is the wider rule of one path segment, which every valid name meets.)
ID_SHAPED_NAME = re.compile(r"j-[0-9a-f]{10}")


def _id_shaped_name(name: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"job name {name!r} is shaped like a job id ('j-' and 10 hex digits, as Portal makes "
        "them): ids and names share the JOB argument of every command, so such a name could "
        "mean another job; choose another --name (e.g. one that does not start with 'j-')",
        details={"name": name},
    )


def _ambiguous_name(ref: str, jobs: list[tuple[Job, str | None]]) -> InvalidArgumentError:
    owned = ", ".join(f"{j.id} ({owner or 'no recorded owner'})" for j, owner in jobs)
    return InvalidArgumentError(
        f"{len(jobs)} jobs are named {ref!r}: {owned}. A name is unique among one user's jobs "
        "only, and an admin's token that has no job of that name cannot tell which is meant: "
        "give the job's id",
        details={"job": ref, "jobs": [j.id for j, _ in jobs]},
    )


def _too_deep(request: Request) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"the body of {request.method} {request.url.path} is JSON nested more than {MAX_DEPTH} "
        "levels deep, deeper than the control plane reads: an event's data is meant to be a "
        "few fields (put large structures in the job's own files)",
        details={"path": request.url.path, "limit": MAX_DEPTH},
    )


def _nests_deeper(value: Any, limit: int) -> bool:
    """Whether decoded JSON ``value`` nests more than ``limit`` objects and lists deep: walked
    with a stack of its own, so that no depth it holds can exhaust Python's."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False


def _reserved_kind(kind: str) -> bool:
    return kind.lower().startswith(RESERVED_KIND_PREFIX)


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
        limit: TokenBuckets,
        owners: Owners,
        failures: FailureLog,
    ) -> None:
        self.store = store
        self.tokens = tokens
        self.store_kind = store_kind
        self.limit = limit
        self.owners = owners
        self.failures = failures
        self._creating: dict[str, threading.Lock] = {}  # user -> held while creating a job
        self._creating_lock = threading.Lock()

    # --- ownership ----------------------------------------------------------------------------

    def _mine(self, who: Principal, job: Job) -> bool:
        if who.job is not None and job.id != who.job:
            return False  # a job token: that one job only
        return who.admin or self.owners.owner_of(job.id) == who.user

    def _own_job(self, request: Request, name: str) -> str:
        """The job id a path names, once the request's principal may use it (in a worker)."""
        ref = _job_param(request, name)
        who: Principal = request.state.principal
        hit = self._store_hit(ref)
        if hit is not None and hit.id == ref and self._mine(who, hit):
            return hit.id  # the common case, a node's reports: its own job's id
        jobs = self._jobs_called(ref, hit)
        if not jobs:
            return ref  # the store's own call refuses it, in its own words
        meant = self._meant(who, ref, jobs)
        if meant is None:
            raise JobNotFoundError(
                f"no job {ref!r} among {who.user}'s: a job is seen and changed by the user who "
                "created it (and by admins)",
                details={"job": ref},
            )
        return meant.id

    def _store_hit(self, ref: str) -> Job | None:
        """The job the store finds by ``ref``: the one whose id it is, else one the store kept
        that name of (from before names were the server's)."""
        try:
            return self.store.get_job(ref)
        except JobNotFoundError:
            return None

    def _jobs_called(self, ref: str, hit: Job | None) -> list[Job]:
        """Every job ``ref`` may mean, whoever's: the store's ``hit`` (see :meth:`_store_hit`)
        and those the owners' record names so."""
        jobs = [] if hit is None else [hit]
        for job_id, _ in self.owners.named(ref):
            job = self._job_by_id(job_id)
            if job is not None and job.id not in {j.id for j in jobs}:
                jobs.append(job)
        return jobs

    def _meant(self, who: Principal, ref: str, jobs: list[Job]) -> Job | None:
        """The job of ``jobs`` that ``ref`` means to ``who``, or None when none is theirs. An id
        wins over a name (as in the embedded store); a name means the caller's own job by that
        name; an admin with none of that name means another user's, when only one user has a
        job of that name (more: refused as ambiguous, naming them, so that the id is given)."""
        for job in jobs:
            if job.id == ref and self._mine(who, job):
                return job
        named: list[tuple[Job, str | None]] = [
            (j, self.owners.owner_of(j.id))
            for j in jobs
            if j.id != ref and self._name_of(j) == ref and self._mine(who, j)
        ]
        own: list[tuple[Job, str | None]] = [(j, o) for j, o in named if o == who.user]
        for group in (own, named):
            if len(group) == 1:
                return group[0][0]
            if len(group) > 1:
                raise _ambiguous_name(ref, group)
        return None

    def _job_by_id(self, job_id: str) -> Job | None:
        """The job whose id is ``job_id``; None when the store has none (its owners' row is
        then stale: the store was emptied since)."""
        try:
            job = self.store.get_job(job_id)
        except JobNotFoundError:
            return None
        return job if job.id == job_id else None  # not a job that is only named so

    # --- names: each user's own ---------------------------------------------------------------

    def _name_of(self, job: Job, entry: Owned | None = None) -> str | None:
        """The job's name: the one its creator gave it here, else one the store kept."""
        entry = entry or self.owners.entry_of(job.id)
        return entry.name if entry is not None and entry.name is not None else job.name

    def _named(self, job: Job, entry: Owned | None = None) -> Job:
        """The job as its client sees it: with its name (which the store does not hold)."""
        name = self._name_of(job, entry)
        return job if name == job.name else attrs.evolve(job, name=name)

    def _check_name_free(self, user: str, name: str) -> None:
        """Refuse ``name`` when one of ``user``'s jobs has it; other users' names are not
        looked at, so the refusal tells nothing of theirs."""
        for job_id, _ in self.owners.named(name, user):
            if self._job_by_id(job_id) is not None:
                raise name_taken(name)
            self.owners.forget(job_id)  # its job is gone from the store: the name is free
        kept = self._store_hit(name)  # a name the store kept from before
        if kept is not None and kept.name == name and self.owners.owner_of(kept.id) == user:
            raise name_taken(name)

    def _user_lock(self, user: str) -> threading.Lock:
        with self._creating_lock:
            return self._creating.setdefault(user, threading.Lock())

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
        except RecursionError:  # msgspec's own guard of its stack, far past MAX_DEPTH
            raise _too_deep(request) from None
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
        if job.name is not None and ID_SHAPED_NAME.fullmatch(job.name):
            raise _id_shaped_name(job.name)
        return api.JobWire.of(await self._call(self._create_owned, job, who.user))

    def _create_owned(self, job: Job, user: str) -> Job:
        """Create ``job`` as ``user``'s, its name unique among ``user``'s jobs only.

        The name is kept in the owners' record, and the store is given the job without one.
        Names are a matter of who owns what, and the owners' record is the server's word on
        that, kept apart from the store on purpose (see :mod:`portal.server.owners`). The other
        way, an ``owner`` column in the store with names unique per owner, would change the
        ``ControlStore`` protocol that the embedded plane, PostgreSQL and the HTTP client all
        speak, rebuild the ``jobs`` table of every existing SQLite and PostgreSQL database, and
        leave two records of who owns a job. This way the embedded plane is untouched (one user,
        names unique, as ever), both stores stay alike by construction, and nothing migrates
        but the owners' record (it gains a ``name`` column). The cost: in the store a server
        serves, its jobs have no name (a tool reading that database directly sees none); jobs
        named before keep their name in the store, and it is read from there.

        A user's creations are serialised, so two of the same name cannot both pass the check.
        """
        with self._user_lock(user):
            if job.name is not None:
                self._check_name_free(user, job.name)
            try:
                created = self.store.create_job(attrs.evolve(job, name=None))
            except InvalidArgumentError:
                # Given no name, a store refuses only a clash of ids, in the words it uses for
                # any clash: said with the job's name, as the embedded store would say it.
                raise name_taken(job.name) from None
            try:
                self.owners.record(created.id, user, job.name)
            except NameTakenError:  # another server process on this record won the name
                self.owners.record(created.id, user)
                raise name_taken(job.name) from None
        return attrs.evolve(created, name=job.name)

    async def list_jobs(self, request: Request) -> msgspec.Struct:
        who: Principal = request.state.principal

        def mine() -> list[Job]:
            entries = self.owners.entries()
            return [
                self._named(j, entries.get(j.id))
                for j in self.store.list_jobs()
                if self._mine(who, j)
            ]

        return api.JobList(jobs=[api.JobWire.of(j) for j in await self._call(mine)])

    async def get_job(self, request: Request) -> msgspec.Struct:
        job_id = await self._job_id(request, "ref")
        return api.JobWire.of(await self._call(lambda: self._named(self.store.get_job(job_id))))

    async def set_state(self, request: Request) -> msgspec.Struct:
        body = await self._body(request, api.SetStateRequest)
        expect = None if body.expect is None else [_job_state(s) for s in body.expect]
        job = await self._call(
            self.store.set_job_state,
            await self._job_id(request),
            _job_state(body.state),
            expect=expect,
        )
        return api.JobWire.of(await self._call(self._named, job))

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
        if _reserved_kind(body.kind):
            raise InvalidArgumentError(
                f"event kind {body.kind!r} is reserved: the {RESERVED_KIND_PREFIX!r} prefix is "
                "the server's own (a client's event of it would pass for the server's word); "
                "give the event a kind of your own, e.g. 'app.owner'",
                details={"kind": body.kind},
            )
        if _nests_deeper(body.data, MAX_DEPTH):
            raise _too_deep(request)
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
        # One of the server's kinds in the store came from elsewhere (a client before they were
        # refused, or a writer of the database itself): never shown as the server's word.
        return api.EventList(
            events=[
                api.SequencedEvent(seq=s, event=api.EventRecord.from_domain(e))
                for s, e in found
                if not _reserved_kind(e.kind)
            ]
        )

    # --- reclaims -----------------------------------------------------------------------------

    async def record_reclaim(self, request: Request) -> None:
        who: Principal = request.state.principal
        if who.job is None and not who.admin:
            raise api.ForbiddenError(
                f"the token of {who.user} may not record a reclaim: a reclaimed pool is left out "
                "of every user's placements for a while, so only an admin's token (`portal "
                "server token create USER --admin`) or a job's own token (`token create USER "
                "--job JOB`, as the node of a job on that machine holds) records one",
                details={"user": who.user},
            )
        body = await self._body(request, api.ReclaimRequest)
        if who.job is not None:
            await self._call(self._check_own_machine, who, who.job, body.machine)
        await self._call(self.store.record_reclaim, body.pool, body.at, body.machine)

    def _check_own_machine(self, who: Principal, held_to: str, machine: str) -> None:
        """A job token records the reclaim of a machine its job ran on, and no other.

        The server knows each attempt's machine but not a machine's pool (its provider, type,
        capacity and zone are the placer's, never sent here): the pool a job's token names for
        its own machine is taken on trust; that much a job's node is trusted with."""
        try:
            job: Job | None = self.store.get_job(held_to)
        except JobNotFoundError:
            job = None
        if job is None or not self._mine(who, job):
            raise api.ForbiddenError(
                f"the token of {who.user} is held to job {held_to}, which is not among "
                f"{who.user}'s jobs: it records no reclaim (an admin's token records any)",
                details={"user": who.user, "job": held_to},
            )
        ran_on = sorted({a.machine for a in self.store.attempts(job.id)})
        if machine not in ran_on:
            raise api.ForbiddenError(
                f"the token of {who.user} is held to job {job.id}, which ran on no machine "
                f"{machine!r} (its attempts ran on {', '.join(map(repr, ran_on)) or 'none yet'}):"
                " a job's token records the reclaim of its own machine only (an admin's token "
                "records any)",
                details={"user": who.user, "job": job.id, "machine": machine},
            )

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

    def _refused_token(self, request: Request, exc: api.UnauthorizedError) -> Response:
        """A request without a valid token: 401, or 429 once its address has failed too often
        (see :mod:`portal.server.failures`); logged in aggregate, not a line each."""
        address = source_of(request.client.host if request.client else None)
        wait = self.failures.limit.failed(address)
        self.failures.refused(address, exc.message, limited=wait > 0)
        if wait <= 0:
            return _error(exc, {"WWW-Authenticate": "Bearer"})
        limit = self.failures.limit.per_minute
        return _error(
            api.RateLimitedError(
                f"the control plane refused {request.method} {request.url.path}: {address} "
                f"sent more than {limit} requests a minute without a valid token (the server's "
                "limit per address; `portal server --auth-failures` sets it), and this one has "
                f"none either: ask again in {math.ceil(wait)} s, with a valid token; {_WAY_IN}",
                details={"retry_after_s": wait, "address": address, "limit_per_minute": limit},
            ),
            {"Retry-After": str(max(1, math.ceil(wait)))},
        )

    def route(
        self, path: str, method: str, handler: _Handler, *, status: int = 200, open_: bool = False
    ) -> Route:
        async def endpoint(request: Request) -> Response:
            user = "-"
            try:
                if not open_:
                    request.state.principal = who = self.principal(request)
                    user = who.user
                    wait = self.limit.take(user)
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
                return self._refused_token(request, exc)
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


def _tallied(
    failures: FailureLog,
) -> Callable[[Starlette], contextlib.AbstractAsyncContextManager[None]]:
    """The app's lifespan: bad-token refusals are counted, and their counts logged each period
    and once more when the server stops (what the last period saw is not lost)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async def every_period() -> None:
            while True:
                await asyncio.sleep(failures.period_s)
                failures.flush()
                failures.limit.prune()

        task = asyncio.create_task(every_period())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            failures.flush()

    return lifespan


def build_app(
    store: ControlStore,
    tokens: TokenFile,
    *,
    store_kind: str = "sqlite",
    rate_per_s: float = RATE_PER_S,
    burst: int | None = None,
    owners: Owners | None = None,
    auth_failures_per_min: int = AUTH_FAILURES_PER_MIN,
    failure_log_period_s: float = 60.0,
) -> Starlette:
    """The API over ``store``, open to the holders of ``tokens``, each user held to
    ``rate_per_s`` requests a second (bursts of ``burst``, default ten times that; 0: no
    limit), each address to ``auth_failures_per_min`` requests without a valid token a minute
    (0: no limit), whose refusals are logged in aggregate each ``failure_log_period_s``."""
    bucket = burst if burst is not None else max(1, math.ceil(rate_per_s * 10))
    owned = owners or Owners(tokens.path.with_name(OWNERS_NAME))
    failures = FailureLog(
        log, limit=FailureLimit(auth_failures_per_min), period_s=failure_log_period_s
    )
    a = _Api(store, tokens, store_kind, TokenBuckets(rate_per_s, bucket), owned, failures)
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
    return Starlette(
        routes=routes,
        exception_handlers={404: _not_found, 405: _not_found},
        lifespan=_tallied(failures),
    )
