"""The node <-> runtime protocol: what crosses the control channel, and the exit statuses.

The node (``portal.node``) and the runtime it starts (``python -m portal.runtime``) are separate
processes, possibly of different releases during an upgrade, so everything they say to each other
is here, in one place: the requests (one JSON object a line on the runtime's Unix socket, tagged
on ``op``), the events the runtime answers with (tagged on ``event``), what a checkpoint could not
carry (:class:`ProblemRecord`, also kept in the checkpoint's header), and the exit statuses that
tell the node how the script ended. The messages follow msgspec's schema-evolution rules: a new
field always gets a default; a union may gain members.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from typing import Final

import msgspec

from portal.core.wire import Wire, encode

__all__ = [
    "EXIT_PAUSED",
    "EXIT_REFUSED",
    "RESTORED_ENV",
    "SECRET_ENV",
    "Abandoned",
    "Cancel",
    "Checkpoint",
    "Checkpointed",
    "Deferred",
    "Failed",
    "Hello",
    "NotCheckpointed",
    "Pause",
    "Paused",
    "Pending",
    "Probe",
    "ProbeReport",
    "ProblemRecord",
    "ProtocolError",
    "RuntimeEvent",
    "RuntimeRequest",
    "decode_runtime_event",
    "decode_runtime_request",
    "encode",
    "take_restored_mark",
    "take_secret",
]

#: The exit status of a paused program: the checkpoint is written whole (EX_TEMPFAIL, "try
#: again later", i.e. resume it).
EXIT_PAUSED: Final = 75
#: The runtime refused to run or resume (a Portal error, not the script's: EX_DATAERR); its last
#: line on stderr is ``portal: error [CODE]: ...``.
EXIT_REFUSED: Final = 65


class ProblemRecord(Wire, frozen=True, kw_only=True):
    """Something a checkpoint could not carry: the value's name, its type, why, and where.

    ``kind`` is ``value`` (a value that cannot be pickled) or ``position`` (the program is where
    no pause can be taken: an except block, a generator partway, a call through C).
    """

    name: str
    type_name: str
    reason: str
    where: str = ""
    kind: str = "value"


# --- requests (node -> runtime), tagged on "op" ------------------------------------------------


class Pause(Wire, frozen=True, kw_only=True, tag_field="op", tag="pause"):
    """Pause at the next safe point, before ``deadline`` (Unix time)."""

    deadline: float


class Cancel(Wire, frozen=True, kw_only=True, tag_field="op", tag="cancel"):
    """Give up the pending pause (the notice was withdrawn)."""


class Probe(Wire, frozen=True, kw_only=True, tag_field="op", tag="probe"):
    """The checkpoint check: at the next safe point, walk the live state as a checkpoint would,
    write nothing, report (:class:`ProbeReport`) and go on. A pause asked for meanwhile wins.

    ``deadline`` (Unix time): stop waiting for a safe point then (none: wait until one comes).
    """

    deadline: float | None = None


class Checkpoint(Wire, frozen=True, kw_only=True, tag_field="op", tag="checkpoint"):
    """A periodic checkpoint: at the next safe point, write the state to ``path`` (a fresh file
    the node names) and go on running; report :class:`Checkpointed`. A pause asked for meanwhile
    wins and is taken at the same safe point.

    ``deadline`` (Unix time): stop waiting for a safe point then (none: wait until one comes).
    """

    path: str
    deadline: float | None = None


RuntimeRequest = Pause | Cancel | Probe | Checkpoint


# --- the peer's proof --------------------------------------------------------------------------

#: The node hands the runtime it starts a per-attempt secret in this variable; the runtime's
#: greeting carries it back. A process that bound the control socket's path first (another
#: program of this user) does not know it, so the node never takes its word for a checkpoint.
SECRET_ENV: Final = "PORTAL_RUNTIME_SECRET"
_taken: list[str] = []


def take_secret(environ: MutableMapping[str, str] | None = None) -> str:
    """The node's secret for this process, removed from the environment the first time (the
    script never sees it, and no checkpoint of its environment carries it); "" when none."""
    if not _taken:
        _taken.append((os.environ if environ is None else environ).pop(SECRET_ENV, ""))
    return _taken[0]


#: The node names a file here when it starts a resume; the runtime creates it once the restore
#: is complete, before any line of the program runs. A resumed process that fails after that
#: failed in the program's own code, however soon: the node need not have heard its greeting.
RESTORED_ENV: Final = "PORTAL_RUNTIME_RESTORED"
_restored_mark: list[str] = []


def take_restored_mark(environ: MutableMapping[str, str] | None = None) -> str:
    """The file to create once restored (:data:`RESTORED_ENV`), removed from the environment
    the first time (the program never sees it); "" when none."""
    if not _restored_mark:
        _restored_mark.append((os.environ if environ is None else environ).pop(RESTORED_ENV, ""))
    return _restored_mark[0]


# --- events (runtime -> node), tagged on "event" -----------------------------------------------


class Hello(Wire, frozen=True, kw_only=True, tag_field="event", tag="hello"):
    """Sent to each client on connecting. ``notes``: what the restore that started this process
    did otherwise than the checkpoint left it (``portal.capture.notes``), for the job's events.
    ``secret``: the per-attempt secret the node gave this process (:data:`SECRET_ENV`); the
    node trusts nothing a peer says until its greeting carries it."""

    pid: int
    pending: bool
    notes: tuple[str, ...] = ()
    secret: str = ""


class Pending(Wire, frozen=True, kw_only=True, tag_field="event", tag="pending"):
    """A pause was requested; the program looks for a safe point until ``deadline``."""

    source: str
    deadline: float


class Deferred(Wire, frozen=True, kw_only=True, tag_field="event", tag="deferred"):
    """A pause point was tried and could not be taken yet (sent when the reasons change)."""

    problems: list[ProblemRecord]


class Paused(Wire, frozen=True, kw_only=True, tag_field="event", tag="paused"):
    """The checkpoint is written; the process exits with 75."""

    checkpoint: str
    bytes: int
    paused_at: str
    seconds_to_safe_point: float
    seconds_to_write: float


class Abandoned(Wire, frozen=True, kw_only=True, tag_field="event", tag="abandoned"):
    """The pause was given up (``reason``: ``deadline`` or ``cancelled``); the program runs on."""

    reason: str
    problems: list[ProblemRecord] = msgspec.field(default_factory=list)


class Failed(Wire, frozen=True, kw_only=True, tag_field="event", tag="failed"):
    """Writing the checkpoint failed; the pause is abandoned and the program runs on."""

    error: str


class ProtocolError(Wire, frozen=True, kw_only=True, tag_field="event", tag="error"):
    """The runtime could not understand a request."""

    message: str


class ProbeReport(Wire, frozen=True, kw_only=True, tag_field="event", tag="probe"):
    """What the checkpoint check found at the safe point ``where``: the values a checkpoint
    could not carry (none: it would succeed). ``partial``: the walk ran out of its time budget
    (a larger state) and the problems, if any, are those found so far. ``checked_bytes``: the
    size of the pickle the walk produced (the part walked, when partial)."""

    problems: list[ProblemRecord] = msgspec.field(default_factory=list)
    partial: bool = False
    checked_bytes: int = 0
    where: str = ""
    seconds: float = 0.0


class Checkpointed(Wire, frozen=True, kw_only=True, tag_field="event", tag="checkpointed"):
    """A periodic checkpoint is written whole at ``checkpoint`` and the program runs on.

    ``stall_seconds``: how long the program was held at the safe point ``where`` (capture and
    write); ``seconds_to_safe_point``: from the request to that safe point.
    """

    checkpoint: str
    bytes: int
    stall_seconds: float
    where: str = ""
    seconds_to_safe_point: float = 0.0
    #: The size of the process's stdout and stderr files at the safe point (after a flush), when
    #: they are files: a resume from this checkpoint repeats what came after, so ``portal logs``
    #: shows the attempt's output up to here only.
    stdout_bytes: int | None = None
    stderr_bytes: int | None = None


class NotCheckpointed(Wire, frozen=True, kw_only=True, tag_field="event", tag="not-checkpointed"):
    """A periodic checkpoint was not written (``reason``: ``problems``, a value the checkpoint
    cannot carry; ``pause``, a pause came first; ``deadline``, no safe point in time;
    ``error``, writing failed, see ``error``). The program runs on."""

    reason: str
    problems: list[ProblemRecord] = msgspec.field(default_factory=list)
    error: str = ""


RuntimeEvent = (
    Hello
    | Pending
    | Deferred
    | Paused
    | Abandoned
    | Failed
    | ProtocolError
    | ProbeReport
    | Checkpointed
    | NotCheckpointed
)


_request_decoder = msgspec.json.Decoder(RuntimeRequest)
_runtime_event_decoder = msgspec.json.Decoder(RuntimeEvent)


def decode_runtime_request(data: bytes | str) -> RuntimeRequest:
    return _request_decoder.decode(data)


def decode_runtime_event(data: bytes | str) -> RuntimeEvent:
    return _runtime_event_decoder.decode(data)
