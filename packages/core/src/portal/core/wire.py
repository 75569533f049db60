"""Wire formats of the control plane: the event log and the notices a node reports.

msgspec Structs (frozen, keyword-only, defaults omitted) with encoders and decoders built once.
Stored formats follow msgspec's schema-evolution rules so that old checkpoints and event logs stay
readable: a new field always gets a default; fields are never reordered, renamed or retyped; a
message family is a tagged union (tag field ``op``) to which new members may be added.

Domain objects convert at the boundary with the ``from_domain`` / ``to_domain`` helpers here.
The other formats live beside their one owner: the node <-> runtime protocol in
:mod:`portal.runtime.protocol`, the checkpoint manifest in :mod:`portal.storage.manifest`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from portal.core.domain import Event, Notice, NoticeKind

__all__ = ["EventRecord", "NoticeRecord", "Wire", "decode_event", "encode"]


class Wire(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Base of every wire struct, here and in the formats beside their owners (subclasses repeat
    ``frozen`` and ``kw_only``, which msgspec does not inherit)."""


class EventRecord(Wire, frozen=True, kw_only=True):
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


class NoticeRecord(Wire, frozen=True, kw_only=True):
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


_encoder = msgspec.json.Encoder()
_event_decoder = msgspec.json.Decoder(EventRecord)


def encode(value: Wire) -> bytes:
    """JSON bytes of any wire struct."""
    return _encoder.encode(value)


def decode_event(data: bytes | str) -> EventRecord:
    return _event_decoder.decode(data)
