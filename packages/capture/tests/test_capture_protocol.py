"""The node <-> runtime protocol: tagged unions, round trips, defaults left out."""

from __future__ import annotations

import msgspec
import pytest

from portal.runtime.protocol import (
    Abandoned,
    Cancel,
    Deferred,
    Failed,
    Hello,
    Pause,
    Paused,
    ProblemRecord,
    decode_runtime_event,
    decode_runtime_request,
    encode,
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
