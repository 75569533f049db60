"""The control-plane service's wire types (API version 1): one module for client and server.

``portal server`` (the ``portal-server`` distribution) answers with these and
:class:`~portal.control.remote.HttpControlStore` (in ``portal``, so that the CLI and the node need
no server install) sends and reads them. Every body is JSON. The rules that keep old clients and
servers talking (see ``docs/control-plane-api.md``):

- a path carries its major version (``/v1/...``); a change an old client could misread (a field
  removed, retyped or given new meaning, a route removed) needs ``/v2``, served beside ``/v1``;
- within ``v1`` fields are only added, each with a default, and readers ignore unknown fields
  (msgspec's schema-evolution rules), so ``API_REVISION`` tells what a server has added.

Errors travel as :class:`ErrorBody` (``code``, ``message``, ``details``) and come back as the same
:class:`~portal.core.errors.PortalError` subclass with the same message (:func:`error_from_body`),
so that a command prints the same words whether its control plane is local or a service.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

import attrs
import msgspec

from portal.core.domain import LATEST_TIME, Attempt, Job
from portal.core.errors import InvalidArgumentError, InvalidSettingError, PortalError
from portal.core.settings import MAX_GIB
from portal.core.wire import EventRecord

__all__ = [
    "API_REVISION",
    "API_VERSION",
    "HEALTH_PATH",
    "MAX_EVENT_KIND",
    "MAX_EVENT_MESSAGE",
    "PREFIX",
    "Appended",
    "AttemptList",
    "AttemptWire",
    "ControlPlaneBusyError",
    "ControlPlaneUnavailableError",
    "EndAttemptRequest",
    "ErrorBody",
    "EventKind",
    "EventList",
    "EventRecord",
    "ForbiddenError",
    "Health",
    "HeardRequest",
    "JobList",
    "JobWire",
    "LastHeard",
    "NewEvent",
    "RateLimitedError",
    "ReclaimList",
    "ReclaimRequest",
    "ReclaimWire",
    "SequencedEvent",
    "SetStateRequest",
    "StartAttemptRequest",
    "UnauthorizedError",
    "Version",
    "error_body",
    "error_from_body",
    "fit_message",
    "plain_data",
]

#: The major version in every path; see the module's rules for when it changes.
API_VERSION = 1
#: What this side of ``v1`` knows: raised whenever a field or a route is added to ``v1``.
API_REVISION = 1
PREFIX = f"/v{API_VERSION}"
HEALTH_PATH = f"{PREFIX}/health"


# --- the domain's records ---------------------------------------------------------------------


#: A moment as the stores keep it: seconds since the epoch, finite, not before it, and one a
#: clock can print (the same bound as a notice's: portal.core.domain.LATEST_TIME).
Time = Annotated[float, msgspec.Meta(ge=0.0, le=LATEST_TIME)]
#: A memory or state size in GiB, as every reader of one bounds it (portal.core.settings.gib).
Gib = Annotated[float, msgspec.Meta(gt=0.0, le=MAX_GIB)]
#: An integer the stores keep (SQLite and PostgreSQL: 64 bits, signed).
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class JobWire(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    id: str
    script: str
    workdir: str
    created_at: Time
    state: str
    name: str | None = None
    args: list[str] = []
    memory_gib: Gib | None = None
    state_gib: Gib | None = None
    nproc_per_node: Annotated[int, msgspec.Meta(ge=1, le=1024)] | None = None

    @classmethod
    def of(cls, job: Job) -> JobWire:
        return msgspec.convert(attrs.asdict(job, recurse=False), cls)

    def to_job(self) -> Job:
        return Job(**msgspec.structs.asdict(self))  # attrs converts state and args back


class AttemptWire(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    job_id: str
    number: Int64
    machine: str
    started_at: Time
    state: str
    ended_at: Time | None = None
    exit_code: Int64 | None = None
    resumed_from: str | None = None

    @classmethod
    def of(cls, attempt: Attempt) -> AttemptWire:
        return msgspec.convert(attrs.asdict(attempt, recurse=False), cls)

    def to_attempt(self) -> Attempt:
        return Attempt(**msgspec.structs.asdict(self))  # attrs converts the state back


class SequencedEvent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    seq: int
    event: EventRecord


class ReclaimWire(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    pool: str
    at: Time


# --- requests ---------------------------------------------------------------------------------


class SetStateRequest(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A state change; with ``expect``, a compare-and-set (refused unless the job is in one)."""

    state: str
    expect: list[str] | None = None


class StartAttemptRequest(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    machine: str
    at: Time
    resumed_from: str | None = None


class EndAttemptRequest(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    state: str
    at: Time
    exit_code: Int64 | None = None


class HeardRequest(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    at: Time


#: The longest event kind the service takes: a kind is a short name readers match on.
MAX_EVENT_KIND = 128
#: The longest event message: a line or a paragraph for ``portal explain`` (long output belongs
#: in the job's logs), far above any Portal writes, far below the body's limit.
MAX_EVENT_MESSAGE = 16_384


def fit_message(message: str) -> str:
    """An event's message as the service takes it: one longer than :data:`MAX_EVENT_MESSAGE`
    (an exception's text, say) is cut, with a mark, rather than refused: a refused report would
    stay in a node's journal, ahead of every later one."""
    if len(message) <= MAX_EVENT_MESSAGE:
        return message
    mark = " … (cut: the whole is in the node's log)"
    return message[: MAX_EVENT_MESSAGE - len(mark)] + mark


#: An event's kind: ``created``, ``checkpoint-every``, ``spot.move``, ``ray.drain-refused``.
#: ``\Z``, not ``$``: a trailing line break is no part of a name.
EventKind = Annotated[
    str,
    msgspec.Meta(
        min_length=1, max_length=MAX_EVENT_KIND, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*\Z"
    ),
]


class NewEvent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """An event for the job the path names. ``id``: the reporter's id for it, when it may send
    it again (a retry after a timeout); the control plane records each id once.

    Each text field is bounded (checked as the service decodes a request, so that its refusal
    names the field): one client must not fill every reader's event log."""

    at: Time
    kind: EventKind
    message: Annotated[str, msgspec.Meta(max_length=MAX_EVENT_MESSAGE)]
    data: dict[str, Any] = {}
    id: Annotated[str, msgspec.Meta(min_length=1, max_length=128)] | None = None


class ReclaimRequest(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    pool: str
    at: Time
    machine: str


# --- answers ----------------------------------------------------------------------------------


class JobList(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    jobs: list[JobWire]


class AttemptList(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    attempts: list[AttemptWire]


class EventList(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    events: list[SequencedEvent]


class ReclaimList(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    reclaims: list[ReclaimWire]


class Appended(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    seq: int


class LastHeard(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    at: float | None = None


class Health(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    ok: bool
    api: int = API_VERSION


class Version(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    api: int
    revision: int
    server: str
    store: str


class ErrorBody(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Every refusal: the error's stable ``code``, its message and its details.

    ``invalid_argument`` says the caller's input was refused (an ``InvalidArgumentError``), so a
    client that does not know ``code`` still exits as for a usage error.
    """

    code: str
    message: str
    details: dict[str, Any] = {}
    invalid_argument: bool = False


# --- errors of the service itself -------------------------------------------------------------


class ControlPlaneUnavailableError(PortalError):
    """The control-plane service cannot be reached, or did not answer in time."""

    code: ClassVar[str] = "CONTROL_PLANE_UNAVAILABLE"


class ControlPlaneBusyError(PortalError):
    """The service's store stayed locked by other writers for longer than its busy timeout."""

    code: ClassVar[str] = "CONTROL_PLANE_BUSY"


class RateLimitedError(PortalError):
    """A user sent more requests than the service takes from one user (``Retry-After`` says
    when to ask again; the client waits and asks again a few times before it says so)."""

    code: ClassVar[str] = "RATE_LIMITED"


class UnauthorizedError(PortalError):
    """A request without a valid token (missing, unknown or revoked)."""

    code: ClassVar[str] = "UNAUTHORIZED"


class ForbiddenError(PortalError):
    """A valid token asked for what its role does not allow (a user's token recording a
    reclaim, which steers every user's placements)."""

    code: ClassVar[str] = "FORBIDDEN"


def _known_errors() -> dict[str, type[PortalError]]:
    from portal.control.postgres import ControlDatabaseError  # psycopg itself stays unimported
    from portal.control.store import JobNotFoundError, JobStateConflictError

    classes: list[type[PortalError]] = [
        PortalError,
        InvalidArgumentError,
        InvalidSettingError,
        JobNotFoundError,
        JobStateConflictError,
        ControlDatabaseError,
        ControlPlaneUnavailableError,
        ControlPlaneBusyError,
        RateLimitedError,
        UnauthorizedError,
        ForbiddenError,
    ]
    return {cls.code: cls for cls in classes}


_OTHER_CODES: dict[tuple[str, bool], type[PortalError]] = {}


def error_body(exc: PortalError) -> ErrorBody:
    return ErrorBody(
        code=exc.code,
        message=exc.message,
        details=plain_data(exc.details),
        invalid_argument=isinstance(exc, InvalidArgumentError),
    )


def error_from_body(body: ErrorBody) -> PortalError:
    """The error the server raised, as the same class (or, for a code this client does not know,
    a class with that code under the right base), with the same message and details."""
    cls = _known_errors().get(body.code)
    if cls is None:
        key = (body.code, body.invalid_argument)
        cls = _OTHER_CODES.get(key)
        if cls is None:
            base = InvalidArgumentError if body.invalid_argument else PortalError
            name = "Remote" + "".join(p.title() for p in body.code.split("_")) + "Error"
            cls = _OTHER_CODES[key] = type(name, (base,), {"code": body.code})
    return cls(body.message, details=body.details)


def plain_data(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` as the stores keep it: JSON values, anything else as its ``str``, keys sorted.

    The embedded stores write event data with ``json.dumps(default=str)``; the client converts
    the same way before sending, so an event reads back alike through either.
    """
    loaded: dict[str, Any] = json.loads(json.dumps(dict(data), default=str, sort_keys=True))
    return loaded
