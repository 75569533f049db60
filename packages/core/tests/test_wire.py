"""Wire formats: round trips, tagged unions, and schema evolution."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from portal.core.domain import Event, Notice
from portal.core.errors import PortalError
from portal.core.wire import (
    MANIFEST_FORMAT,
    Abandoned,
    Cancel,
    ChunkEntry,
    Deferred,
    EventRecord,
    Failed,
    Hello,
    Manifest,
    NoticeRecord,
    Pause,
    Paused,
    ProblemRecord,
    decode_event,
    decode_manifest,
    decode_runtime_event,
    decode_runtime_request,
    encode,
)


def test_event_round_trip_through_domain() -> None:
    event = Event(job_id="j", at=1.5, kind="notice", message="m", data={"deadline": 3})
    record = EventRecord.from_domain(event)
    assert decode_event(encode(record)).to_domain() == event


def test_notice_round_trip() -> None:
    n = Notice(
        id="n",
        source="aws",
        provider="aws",
        kind="rebalance",
        deadline=9,
        seen_at=1,
        raw={"noticeTime": "x"},
    )
    assert (
        msgspec.json.decode(encode(NoticeRecord.from_domain(n)), type=NoticeRecord).to_domain() == n
    )


def test_runtime_requests_are_a_tagged_union() -> None:
    assert decode_runtime_request(b'{"op":"pause","deadline":12.5}') == Pause(deadline=12.5)
    assert decode_runtime_request(encode(Cancel())) == Cancel()
    with pytest.raises(msgspec.ValidationError):
        decode_runtime_request(b'{"op":"explode"}')


def test_runtime_events_round_trip() -> None:
    problem = ProblemRecord(
        name="digest",
        type_name="_hashlib.HASH",
        reason="TypeError: cannot pickle",
        where="t.py:4 in f",
    )
    events = [
        Hello(pid=1, pending=False),
        Deferred(problems=[problem]),
        Abandoned(reason="deadline"),
        Paused(
            checkpoint="/c",
            bytes=10,
            paused_at="t.py:4 in f",
            seconds_to_safe_point=0.1,
            seconds_to_write=0.2,
        ),
    ]
    for event in events:
        assert decode_runtime_event(encode(event)) == event
    assert decode_runtime_event(b'{"event":"failed","error":"x"}') == Failed(error="x")


def test_defaults_are_omitted() -> None:
    assert encode(Pause(deadline=1.0)) == b'{"op":"pause","deadline":1.0}'
    assert b"kind" not in encode(ProblemRecord(name="a", type_name="b", reason="c"))


def test_manifest_from_older_writer_without_new_fields_is_readable() -> None:
    old = b'{"job_id":"j","checkpoint_id":"c","created_at":1.0}'
    manifest = decode_manifest(old)
    # It does not say its format: it is format 1 (current writers always say theirs).
    assert manifest.format == 1 and manifest.chunks == [] and manifest.parent is None


def test_manifest_with_unknown_future_fields_is_readable() -> None:
    data = b'{"job_id":"j","checkpoint_id":"c","created_at":1.0,"shiny_new_field":[1,2]}'
    assert decode_manifest(data).job_id == "j"


def test_manifest_from_a_newer_format_is_refused() -> None:
    data = encode(Manifest(format=MANIFEST_FORMAT + 1, job_id="j", checkpoint_id="c", created_at=0))
    with pytest.raises(PortalError, match="newer than this Portal reads"):
        decode_manifest(data)


chunks = st.builds(
    ChunkEntry,
    index=st.integers(0, 10**6),
    fingerprint=st.text(min_size=1, max_size=64),
    size=st.integers(0, 2**40),
    stored_size=st.integers(0, 2**40),
    key=st.text(min_size=1, max_size=80),
)


@given(
    st.builds(
        Manifest,
        job_id=st.text(min_size=1),
        checkpoint_id=st.text(min_size=1),
        created_at=st.floats(0, 2e9),
        chunks=st.lists(chunks, max_size=5),
        total_size=st.integers(0, 2**50),
        parent=st.none() | st.text(min_size=1),
    )
)
def test_manifest_round_trip(manifest: Manifest) -> None:
    assert decode_manifest(encode(manifest)) == manifest
