"""The limit on failed authentications per address and their log in aggregate, on a clock of
the test's own (the server's side of it is tested over HTTP in test_api.py)."""

from __future__ import annotations

import logging

import pytest

from portal.server.failures import FailureLimit, FailureLog, source_of


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_address_is_its_ip_and_an_ipv6_one_its_64() -> None:
    assert source_of("10.0.0.7") == "10.0.0.7"
    assert source_of("2001:db8:1:2:aaaa::1") == source_of("2001:db8:1:2:bbbb::9")
    assert source_of("2001:db8:1:2:aaaa::1") == "2001:db8:1:2::/64"
    assert source_of("::ffff:10.0.0.7") == "10.0.0.7"  # an IPv4 client of an IPv6 socket
    assert source_of(None) == "(unknown address)"


def test_past_the_limit_an_address_waits_for_its_bucket_to_refill() -> None:
    clock = Clock()
    limit = FailureLimit(3, clock=clock)
    assert [limit.failed("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limit.failed("a") == pytest.approx(20.0)  # one failure every 60 / 3 s
    assert limit.failed("b") == 0.0  # a bucket per address
    clock.now += 20.0
    assert limit.failed("a") == 0.0
    assert limit.failed("a") > 0
    assert FailureLimit(0, clock=clock).failed("a") == 0.0  # 0: no limit


def test_full_buckets_are_forgotten_and_too_many_addresses_share_one() -> None:
    clock = Clock()
    limit = FailureLimit(2, clock=clock, max_addresses=2)
    limit.failed("a")
    limit.failed("b")
    assert limit.failed("c") == 0.0 and limit.failed("d") == 0.0  # c and d share one bucket
    assert limit.failed("e") > 0
    clock.now += 60.0
    limit.prune()
    assert len(limit) == 0


def test_refusals_are_logged_first_at_once_then_as_a_count_per_period(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("test.failures")
    failures = FailureLog(log, limit=FailureLimit(2))
    with caplog.at_level(logging.WARNING, logger="test.failures"):
        for _ in range(5):
            failures.refused("10.0.0.7", "its token is unknown", limited=False)
        failures.refused("10.0.0.7", "its token is unknown", limited=True)
        assert len(caplog.records) == 1
        assert "refused a request from 10.0.0.7 for its token" in caplog.messages[0]
        failures.flush()
        assert len(caplog.records) == 2
        assert caplog.messages[1].startswith(
            "refused 5 more requests from 10.0.0.7 for its token in the last minute, 1 of them "
            "answered 429 (past the limit of 2 a minute per address); the last: its token is"
        )
        failures.refused("10.0.0.7", "again", limited=False)  # still failing: counted only
        failures.flush()
        assert len(caplog.records) == 3 and "refused 1 more request from" in caplog.messages[2]
        failures.flush()  # a silent period: forgotten
        failures.refused("10.0.0.7", "back", limited=False)
        assert len(caplog.records) == 4 and "for its token: back" in caplog.messages[3]
