"""The control plane's wire formats: round trips through the domain objects."""

from __future__ import annotations

import msgspec

from portal.core.domain import Event, Notice
from portal.core.wire import EventRecord, NoticeRecord, decode_event, encode


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
