"""Wire formats: what crosses a process, machine or release boundary.

msgspec Structs (frozen, keyword-only, defaults omitted) with encoders and decoders built once.
Stored formats follow msgspec's schema-evolution rules so that old checkpoints and event logs stay
readable: a new field always gets a default; fields are never reordered, renamed or retyped; a
message family is a tagged union (tag field ``op``) to which new members may be added.

Domain objects convert at the boundary with the ``from_domain`` / ``to_domain`` helpers here.
"""

from __future__ import annotations

from typing import Any

import msgspec

from portal.core.domain import Event, Notice, NoticeKind

__all__ = [
    "MANIFEST_FORMAT",
    "Abandoned",
    "Cancel",
    "Checkpoint",
    "Checkpointed",
    "ChunkEntry",
    "Deferred",
    "EventRecord",
    "Failed",
    "Hello",
    "Manifest",
    "NotCheckpointed",
    "NoticeRecord",
    "Pause",
    "Paused",
    "Pending",
    "Probe",
    "ProbeReport",
    "ProblemRecord",
    "ProtocolError",
    "RuntimeEvent",
    "RuntimeRequest",
    "decode_event",
    "decode_manifest",
    "decode_runtime_event",
    "decode_runtime_request",
    "encode",
]

#: Current version of the checkpoint manifest format. Readers accept this and every older one.
#: 1: one stored object per chunk. 2: chunks may be stored packed, several to an object
#: (``ChunkEntry.offset``); a format-1 reader would misread those, so it is told to upgrade.
MANIFEST_FORMAT = 2


class _Wire(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Base of every wire struct (subclasses repeat ``frozen`` and ``kw_only``, which msgspec does not inherit)."""


class EventRecord(_Wire, frozen=True, kw_only=True):
    """One line of a job's event log, as stored and streamed."""

    job_id: str
    at: float
    kind: str
    message: str
    data: dict[str, Any] = {}

    @classmethod
    def from_domain(cls, event: Event) -> EventRecord:
        return cls(
            job_id=event.job_id,
            at=event.at,
            kind=event.kind,
            message=event.message,
            data=dict(event.data),
        )

    def to_domain(self) -> Event:
        return Event(
            job_id=self.job_id, at=self.at, kind=self.kind, message=self.message, data=self.data
        )


class NoticeRecord(_Wire, frozen=True, kw_only=True):
    """A notice as the node reports it."""

    id: str
    source: str
    provider: str
    kind: str
    deadline: float
    seen_at: float
    cancelled: bool = False
    raw: dict[str, Any] = {}

    @classmethod
    def from_domain(cls, notice: Notice) -> NoticeRecord:
        return cls(
            id=notice.id,
            source=notice.source,
            provider=notice.provider,
            kind=str(notice.kind),
            deadline=notice.deadline,
            seen_at=notice.seen_at,
            cancelled=notice.cancelled,
            raw=dict(notice.raw),
        )

    def to_domain(self) -> Notice:
        return Notice(
            id=self.id,
            source=self.source,
            provider=self.provider,
            kind=NoticeKind(self.kind),
            deadline=self.deadline,
            seen_at=self.seen_at,
            cancelled=self.cancelled,
            raw=self.raw,
        )


class ChunkEntry(_Wire, frozen=True, kw_only=True):
    """One chunk of a checkpoint's byte stream."""

    index: int
    fingerprint: str  # keyed fingerprint (no plaintext hash is exposed)
    size: int  # plaintext bytes
    stored_size: int  # bytes as stored (encrypted)
    key: str  # object key of the stored chunk, relative to the job's root
    # The checkpoint and position whose associated data sealed the stored chunk. A chunk reused
    # from an earlier checkpoint (dedup) keeps the seal it was encrypted under; None means "this
    # checkpoint, this index". Added for portal-storage (manifest format 1 readers ignore it).
    sealed_in: str | None = None
    sealed_index: int | None = None
    # Where the sealed chunk starts inside the object ``key`` when several chunks are packed into
    # one object (manifest format 2); None: the object holds this chunk alone (format 1).
    offset: int | None = None


class Manifest(_Wire, frozen=True, kw_only=True):
    """Written last: a checkpoint without its manifest is incomplete and never resumed."""

    # A manifest that does not say its format is format 1 (its writer left the field out at its
    # default); writers always write it (portal-storage's ``_manifest_json``).
    format: int = 1
    job_id: str
    checkpoint_id: str
    created_at: float
    chunks: list[ChunkEntry] = []
    total_size: int = 0
    fingerprint: str = ""  # keyed fingerprint of the whole plaintext stream
    # How chunk fingerprints were computed; absent means what the first release used.
    fingerprint_algorithm: str = "hmac-sha256"
    parent: str | None = None  # the previous checkpoint (chunks shared with it are not re-sent)
    python: str = ""  # e.g. "cpython-3.11"
    summary: dict[str, Any] = {}  # what the state holds and how large


class ProblemRecord(_Wire, frozen=True, kw_only=True):
    """Something a checkpoint could not carry: the value's name, its type, why, and where.

    ``kind`` is ``value`` (a value that cannot be pickled) or ``position`` (the program is where
    no pause can be taken: an except block, a generator partway, a call through C).
    """

    name: str
    type_name: str
    reason: str
    where: str = ""
    kind: str = "value"


# --- node <-> runtime: the control channel (one JSON object a line, on a Unix socket) -------------
# Requests (node -> runtime) are tagged on "op"; events (runtime -> node) on "event".


class Pause(_Wire, frozen=True, kw_only=True, tag_field="op", tag="pause"):
    """Pause at the next safe point, before ``deadline`` (Unix time)."""

    deadline: float


class Cancel(_Wire, frozen=True, kw_only=True, tag_field="op", tag="cancel"):
    """Give up the pending pause (the notice was withdrawn)."""


class Probe(_Wire, frozen=True, kw_only=True, tag_field="op", tag="probe"):
    """The checkpoint check: at the next safe point, walk the live state as a checkpoint would,
    write nothing, report (:class:`ProbeReport`) and go on. A pause asked for meanwhile wins.

    ``deadline`` (Unix time): stop waiting for a safe point then (none: wait until one comes).
    """

    deadline: float | None = None


class Checkpoint(_Wire, frozen=True, kw_only=True, tag_field="op", tag="checkpoint"):
    """A periodic checkpoint: at the next safe point, write the state to ``path`` (a fresh file
    the node names) and go on running; report :class:`Checkpointed`. A pause asked for meanwhile
    wins and is taken at the same safe point.

    ``deadline`` (Unix time): stop waiting for a safe point then (none: wait until one comes).
    """

    path: str
    deadline: float | None = None


RuntimeRequest = Pause | Cancel | Probe | Checkpoint


class Hello(_Wire, frozen=True, kw_only=True, tag_field="event", tag="hello"):
    """Sent to each client on connecting. ``notes``: what the restore that started this process
    did otherwise than the checkpoint left it (``portal.capture.notes``), for the job's events."""

    pid: int
    pending: bool
    notes: tuple[str, ...] = ()


class Pending(_Wire, frozen=True, kw_only=True, tag_field="event", tag="pending"):
    """A pause was requested; the program looks for a safe point until ``deadline``."""

    source: str
    deadline: float


class Deferred(_Wire, frozen=True, kw_only=True, tag_field="event", tag="deferred"):
    """A pause point was tried and could not be taken yet (sent when the reasons change)."""

    problems: list[ProblemRecord]


class Paused(_Wire, frozen=True, kw_only=True, tag_field="event", tag="paused"):
    """The checkpoint is written; the process exits with 75."""

    checkpoint: str
    bytes: int
    paused_at: str
    seconds_to_safe_point: float
    seconds_to_write: float


class Abandoned(_Wire, frozen=True, kw_only=True, tag_field="event", tag="abandoned"):
    """The pause was given up (``reason``: ``deadline`` or ``cancelled``); the program runs on."""

    reason: str
    problems: list[ProblemRecord] = []


class Failed(_Wire, frozen=True, kw_only=True, tag_field="event", tag="failed"):
    """Writing the checkpoint failed; the pause is abandoned and the program runs on."""

    error: str


class ProtocolError(_Wire, frozen=True, kw_only=True, tag_field="event", tag="error"):
    """The runtime could not understand a request."""

    message: str


class ProbeReport(_Wire, frozen=True, kw_only=True, tag_field="event", tag="probe"):
    """What the checkpoint check found at the safe point ``where``: the values a checkpoint
    could not carry (none: it would succeed). ``partial``: the walk ran out of its time budget
    (a larger state) and the problems, if any, are those found so far. ``checked_bytes``: the
    size of the pickle the walk produced (the part walked, when partial)."""

    problems: list[ProblemRecord] = []
    partial: bool = False
    checked_bytes: int = 0
    where: str = ""
    seconds: float = 0.0


class Checkpointed(_Wire, frozen=True, kw_only=True, tag_field="event", tag="checkpointed"):
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


class NotCheckpointed(_Wire, frozen=True, kw_only=True, tag_field="event", tag="not-checkpointed"):
    """A periodic checkpoint was not written (``reason``: ``problems``, a value the checkpoint
    cannot carry; ``pause``, a pause came first; ``deadline``, no safe point in time;
    ``error``, writing failed, see ``error``). The program runs on."""

    reason: str
    problems: list[ProblemRecord] = []
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

_encoder = msgspec.json.Encoder()
_event_decoder = msgspec.json.Decoder(EventRecord)
_manifest_decoder = msgspec.json.Decoder(Manifest)
_request_decoder = msgspec.json.Decoder(RuntimeRequest)
_runtime_event_decoder = msgspec.json.Decoder(RuntimeEvent)


def encode(value: _Wire) -> bytes:
    """JSON bytes of any wire struct."""
    return _encoder.encode(value)


def decode_event(data: bytes | str) -> EventRecord:
    return _event_decoder.decode(data)


def decode_manifest(data: bytes | str) -> Manifest:
    """Decode a manifest; refuses one written by a newer Portal with a clear error."""
    manifest = _manifest_decoder.decode(data)
    if manifest.format > MANIFEST_FORMAT:
        from portal.core.errors import PortalError

        raise PortalError(
            f"checkpoint {manifest.checkpoint_id} of job {manifest.job_id} has manifest format "
            f"{manifest.format}, newer than this Portal reads ({MANIFEST_FORMAT}): upgrade Portal "
            "on this machine to resume it"
        )
    return manifest


def decode_runtime_request(data: bytes | str) -> RuntimeRequest:
    return _request_decoder.decode(data)


def decode_runtime_event(data: bytes | str) -> RuntimeEvent:
    return _runtime_event_decoder.decode(data)
