"""Fuzzing the IMDS document parsers: any body is parsed or refused with ValueError, never worse."""

from __future__ import annotations

import contextlib
import datetime as dt
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from portal.providers.aws.parsing import (
    parse_aws_time,
    parse_instance_action,
    parse_maintenance,
    parse_maintenance_time,
    parse_rebalance,
    parse_termination_time,
)
from portal.providers.aws.testing import iso_time, maintenance_time

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
bodies = (
    st.text(max_size=300)
    | json_values.map(json.dumps)
    | st.binary(max_size=200).map(lambda b: b.decode("utf-8", "replace"))
)
times = st.datetimes(min_value=dt.datetime(1970, 1, 2), max_value=dt.datetime(9998, 1, 1)).map(
    lambda d: d.replace(tzinfo=dt.UTC).timestamp() // 1
)


@settings(max_examples=150, deadline=None)
@given(bodies)
def test_parsers_accept_or_refuse_with_value_error(body: str) -> None:
    for parse in (
        parse_instance_action,
        parse_rebalance,
        parse_maintenance,
        parse_aws_time,
        parse_maintenance_time,
    ):
        with contextlib.suppress(ValueError):
            parse(body)
    parse_termination_time(body)  # never raises: a non-time means no notice


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["terminate", "stop", "hibernate"]), times)
def test_instance_action_round_trip(action: str, when: float) -> None:
    body = json.dumps({"action": action, "time": iso_time(when)})
    parsed = parse_instance_action(body)
    assert (parsed.action, parsed.time) == (action, when)
    assert parse_termination_time(iso_time(when)) == when


@settings(max_examples=100, deadline=None)
@given(
    times, st.sampled_from(["active", "completed", "canceled"]), st.text(min_size=1, max_size=20)
)
def test_maintenance_round_trip(when: float, state: str, event_id: str) -> None:
    body = json.dumps(
        [
            {
                "NotBefore": maintenance_time(when),
                "Code": "system-reboot",
                "EventId": event_id,
                "State": state,
            }
        ]
    )
    (event,), problems = parse_maintenance(body)
    assert (event.not_before, event.state, event.event_id, problems) == (when, state, event_id, [])


@settings(max_examples=80, deadline=None)
@given(st.lists(json_values, max_size=5))
def test_maintenance_entries_never_crash(entries: list[object]) -> None:
    events, problems = parse_maintenance(json.dumps(entries))
    assert len(events) + len(problems) <= len(entries)
    assert all(e.event_id for e in events)


def test_examples_from_the_documentation() -> None:
    assert parse_aws_time("2017-09-18T08:22:00Z") == 1505722920.0
    assert parse_maintenance_time("21 Jan 2019 09:00:43 GMT") == 1548061243.0
    assert parse_termination_time("2015-01-05T18:02:00Z") == 1420480920.0
    assert parse_termination_time("terminate") is None
