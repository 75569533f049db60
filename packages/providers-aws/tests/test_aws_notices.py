"""The AWS notice source against the IMDSv2 conformance fake: contract and edge cases."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from portal.core.domain import NoticeKind
from portal.core.errors import PortalError
from portal.core.specs import NoticeSource, NoticeSourceContext
from portal.providers.aws.notices import (
    INSTANCE_ACTION,
    MAINTENANCE,
    TERMINATION_TIME,
    AwsNoticeSource,
)
from portal.providers.aws.testing import FakeIMDS, iso_time
from portal.providers.base.testing import loopback_only
from portal.testing import FakeClock, NoticeSourceContract

FAST = {"poll_interval_s": 0.05, "slow_interval_s": 0.05, "request_timeout_s": 1.0}


@pytest.fixture(autouse=True)
def _no_real_network() -> Iterator[None]:
    with loopback_only():
        yield


@pytest.fixture
def imds() -> Iterator[FakeIMDS]:
    with FakeIMDS() as fake:
        yield fake


@pytest.fixture
def empty_dmi(tmp_path: Path) -> Path:
    return tmp_path


def make(imds: FakeIMDS, dmi: Path, **kwargs: object) -> AwsNoticeSource:
    options = {**FAST, **kwargs}
    return AwsNoticeSource(endpoint=imds.url, dmi_dir=dmi, **options)  # type: ignore[arg-type]


@pytest.fixture
def source(imds: FakeIMDS, empty_dmi: Path) -> Iterator[AwsNoticeSource]:
    src = make(imds, empty_dmi)
    yield src
    src.close()


def poll_until(source: NoticeSource, want: int = 1, timeout_s: float = 5.0) -> list:  # type: ignore[type-arg]
    found: list = []  # type: ignore[type-arg]
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and len(found) < want:
        with contextlib.suppress(PortalError):
            found.extend(source.poll(0.1))
    return found


class TestAwsContract(NoticeSourceContract):
    @pytest.fixture(autouse=True)
    def _fake(self, tmp_path: Path) -> Iterator[None]:
        with loopback_only(), FakeIMDS() as fake:
            self.fake = fake
            self.dmi = tmp_path
            yield

    def make_source(self) -> NoticeSource:
        return make(self.fake, self.dmi)

    def announce(self, source: NoticeSource, seconds: float) -> None:
        self.fake.preempt(in_seconds=seconds)


# --- detection ---------------------------------------------------------------------------------


def write_dmi(path: Path, **fields: str) -> Path:
    for name, value in fields.items():
        (path / name).write_text(value + "\n")
    return path


@pytest.mark.parametrize(
    "fields",
    [
        {"sys_vendor": "Amazon EC2"},
        {"bios_vendor": "Amazon EC2"},
        {"product_uuid": "EC2E1916-9099-7CAF-FD21-012345ABCDEF"},
        {"sys_vendor": "Xen", "product_version": "4.11.amazon"},
    ],
)
def test_detects_ec2_from_dmi(tmp_path: Path, fields: dict[str, str]) -> None:
    source = AwsNoticeSource(dmi_dir=write_dmi(tmp_path, **fields))
    assert source.detect() is True
    source.close()


def test_off_ec2_without_override_it_sends_nothing(tmp_path: Path) -> None:
    source = AwsNoticeSource(dmi_dir=write_dmi(tmp_path, sys_vendor="Google"))
    try:
        assert source.detect() is False
        with pytest.raises(PortalError, match="AWS_EC2_METADATA_SERVICE_ENDPOINT"):
            source.poll(0)
    finally:
        source.close()


def test_reads_the_override_from_the_context_environ_only(
    imds: FakeIMDS, empty_dmi: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url)
    ctx = NoticeSourceContext(settings={"dmi_dir": str(empty_dmi)})
    assert AwsNoticeSource.from_context(ctx).detect() is False  # os.environ is not consulted
    ctx = NoticeSourceContext(
        settings={"dmi_dir": str(empty_dmi)},
        environ={"AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url},
    )
    source = AwsNoticeSource.from_context(ctx)
    try:
        assert source.detect() and source.poll(0) == []
    finally:
        source.close()
    assert imds.count() > 0


def test_detect_sends_no_request(imds: FakeIMDS, source: AwsNoticeSource) -> None:
    assert source.detect()
    assert imds.requests == []


# --- IMDSv2 ------------------------------------------------------------------------------------


def test_one_token_serves_many_polls_and_is_sent_on_every_get(
    imds: FakeIMDS, source: AwsNoticeSource
) -> None:
    for _ in range(5):
        source.poll(0.06)
    assert imds.tokens_issued == 1
    gets = [r for r in imds.requests if r.method == "GET"]
    assert len(gets) >= 5 and all(r.header("x-aws-ec2-metadata-token") for r in gets)
    put = next(r for r in imds.requests if r.method == "PUT")
    assert put.header("x-aws-ec2-metadata-token-ttl-seconds") == "21600"


def test_an_expired_token_is_replaced_after_a_401(imds: FakeIMDS, source: AwsNoticeSource) -> None:
    source.poll(0)
    imds.expire_tokens()
    imds.preempt(in_seconds=120)
    (notice,) = poll_until(source)
    assert notice.kind is NoticeKind.PREEMPTION
    assert imds.tokens_issued == 2


def test_the_token_is_refreshed_before_it_expires(imds: FakeIMDS, empty_dmi: Path) -> None:
    clock = FakeClock()
    source = make(imds, empty_dmi, clock=clock, token_ttl_s=100)
    try:
        source.poll(0)
        clock.advance(80)
        source.poll(0)
        assert imds.tokens_issued == 1
        clock.advance(15)  # within the last tenth of the TTL
        source.poll(0)
        assert imds.tokens_issued == 2
        assert imds.count("/latest/meta-data", method="GET") and not any(
            r
            for r in imds.requests
            if r.method == "GET"
            and r.path.startswith("/latest/meta")
            and not r.header("x-aws-ec2-metadata-token")
        )
    finally:
        source.close()


def test_imds_turned_off_says_how_to_turn_it_on(imds: FakeIMDS, source: AwsNoticeSource) -> None:
    imds.disabled = True
    with pytest.raises(PortalError, match="http-endpoint enabled"):
        source.poll(0)


def test_an_unanswered_token_request_names_the_hop_limit(imds: FakeIMDS, empty_dmi: Path) -> None:
    source = make(imds, empty_dmi, request_timeout_s=0.2)
    imds.stop_answering()
    try:
        with pytest.raises(PortalError, match="hop limit") as info:
            source.poll(0)
        assert imds.url in str(info.value)
    finally:
        imds.resume_answering()
        source.close()


def test_unreachable_imds_is_an_error_not_no_notice(empty_dmi: Path) -> None:
    with FakeIMDS() as gone:
        url = gone.url
    source = AwsNoticeSource(endpoint=url, dmi_dir=empty_dmi, request_timeout_s=0.5)
    try:
        with pytest.raises(PortalError, match="connection refused"):
            source.poll(0)
    finally:
        source.close()


# --- notices -----------------------------------------------------------------------------------


@pytest.mark.parametrize("action", ["terminate", "stop", "hibernate"])
def test_instance_action_is_a_preemption_with_the_stated_deadline(
    imds: FakeIMDS, source: AwsNoticeSource, action: str
) -> None:
    stated = imds.preempt(in_seconds=120, action=action)
    (notice,) = poll_until(source)
    assert notice.kind is NoticeKind.PREEMPTION and notice.provider == "aws"
    assert iso_time(notice.deadline) == stated
    assert notice.raw["action"] == action
    assert source.poll(0.1) == []


def test_legacy_termination_time_alone_is_a_notice_and_is_not_doubled(
    imds: FakeIMDS, source: AwsNoticeSource
) -> None:
    with imds.lock:
        imds.termination_time = iso_time(time.time() + 100)
    (legacy,) = poll_until(source)
    assert legacy.raw["document"] == "spot/termination-time"
    with imds.lock:  # the same interruption, now also as instance-action: same id, not reported
        imds.instance_action = {"action": "terminate", "time": imds.termination_time}
    assert poll_until(source, timeout_s=0.5) == []


@pytest.mark.parametrize("value", ["", "not a time", "2015-01-05T18:02:00", "<html>"])
def test_a_termination_time_that_is_not_a_time_is_no_notice(
    imds: FakeIMDS, source: AwsNoticeSource, value: str
) -> None:
    with imds.lock:
        imds.termination_time = value if value != "2015-01-05T18:02:00" else value + "Z"
    assert poll_until(source, timeout_s=0.4) == []


def test_rebalance_recommendation(imds: FakeIMDS, source: AwsNoticeSource) -> None:
    imds.recommend_rebalance()
    (notice,) = poll_until(source)
    assert notice.kind is NoticeKind.REBALANCE
    assert 100 <= notice.notice_s <= 120


def test_maintenance_is_reported_then_withdrawn_when_canceled(
    imds: FakeIMDS, source: AwsNoticeSource
) -> None:
    event_id = imds.schedule_maintenance(code="instance-stop", in_seconds=3600)
    (notice,) = poll_until(source)
    assert notice.kind is NoticeKind.MAINTENANCE and 3590 <= notice.notice_s <= 3601
    imds.set_maintenance_state(event_id, "canceled")
    (withdrawn,) = poll_until(source)
    assert (withdrawn.id, withdrawn.cancelled) == (notice.id, True)
    assert poll_until(source, timeout_s=0.3) == []  # once


def test_a_completed_maintenance_is_withdrawn_and_a_vanished_one_is_not(
    imds: FakeIMDS, source: AwsNoticeSource
) -> None:
    first = imds.schedule_maintenance(event_id="instance-event-1")
    imds.schedule_maintenance(event_id="instance-event-2")
    assert len(poll_until(source, want=2)) == 2
    imds.set_maintenance_state(first, "completed")
    (withdrawn,) = poll_until(source)
    assert withdrawn.cancelled
    with imds.lock:
        imds.maintenance = [e for e in imds.maintenance if e["EventId"] != "instance-event-2"]
    assert poll_until(source, timeout_s=0.3) == []


def test_a_missing_instance_action_withdraws_nothing(
    imds: FakeIMDS, source: AwsNoticeSource
) -> None:
    imds.preempt(in_seconds=120)
    assert len(poll_until(source)) == 1
    imds.cancel()  # EC2 never withdraws an interruption: a 404 glitch must not drop it
    assert poll_until(source, timeout_s=0.3) == []


def test_a_restarted_node_sees_a_notice_already_there(imds: FakeIMDS, empty_dmi: Path) -> None:
    imds.preempt(in_seconds=60)
    source = make(imds, empty_dmi)
    try:
        assert len(source.poll(0)) == 1
    finally:
        source.close()


def test_clock_skew_is_converted_to_this_machines_clock(empty_dmi: Path) -> None:
    with FakeIMDS(skew_s=600.0) as imds:  # IMDS' clock is ten minutes ahead of ours
        source = make(imds, empty_dmi)
        try:
            imds.preempt(in_seconds=120)
            (notice,) = poll_until(source)
            assert 110 <= notice.deadline - time.time() <= 121
        finally:
            source.close()


def test_an_imds_whose_clock_is_57_years_off_is_no_notice_at_all(empty_dmi: Path) -> None:
    """A hostile or broken IMDS: its Date is 57 years ahead, and its notice time with it.
    The Date moves nothing (a bad header, not a skewed clock), and a notice time 57 years away
    is malformed: reported as unreadable, never a notice for the year 2083."""
    with FakeIMDS(skew_s=57 * 365 * 86_400.0) as imds:
        source = make(imds, empty_dmi)
        try:
            imds.preempt(in_seconds=120)
            with pytest.raises(PortalError, match="is more than a day from this machine's clock"):
                for _ in range(40):
                    source.poll(0.05)
        finally:
            source.close()


def test_deadlines_follow_an_injected_clock(imds: FakeIMDS, empty_dmi: Path) -> None:
    start = float(int(time.time()) - 300)  # this machine's clock, five minutes behind IMDS's
    clock = FakeClock(start=start)
    source = make(imds, empty_dmi, clock=clock)
    try:
        imds.preempt(in_seconds=120)
        (notice,) = source.poll(0)
        assert notice.seen_at == start and 118 <= notice.notice_s <= 121
    finally:
        source.close()


# --- bad answers -----------------------------------------------------------------------------


def test_a_transient_error_raises_and_the_notice_comes_on_the_next_poll(
    imds: FakeIMDS, source: AwsNoticeSource
) -> None:
    source.poll(0)
    imds.preempt(in_seconds=120, legacy=False)
    imds.fail_next(503, times=2, path=INSTANCE_ACTION)
    with pytest.raises(PortalError, match="503"):
        for _ in range(3):
            source.poll(0.06)
    assert len(poll_until(source)) == 1


def test_a_rate_limit_backs_off(imds: FakeIMDS, empty_dmi: Path) -> None:
    clock = FakeClock()
    source = make(imds, empty_dmi, clock=clock, poll_interval_s=1.0)
    try:
        source.poll(0)
        clock.advance(1.0)
        imds.fail_next(429, path=INSTANCE_ACTION)
        with pytest.raises(PortalError, match="rate limited"):
            source.poll(0)
        imds.clear_requests()
        clock.advance(2.0)
        source.poll(0)
        assert imds.count(INSTANCE_ACTION) == 0  # waits at least 5 s after a 429
        clock.advance(3.5)
        source.poll(0)
        assert imds.count(INSTANCE_ACTION) == 1
    finally:
        source.close()


@pytest.mark.parametrize(
    "body",
    [
        b"<html><body>502 Bad Gateway</body></html>",
        b'{"action": "terminate"',
        b"\xff\xfe\x00",
        b'{"action": "explode", "time": "2030-01-01T00:00:00Z"}',
        b'["terminate"]',
        b"null",
    ],
)
def test_a_malformed_instance_action_is_an_error_never_a_notice(
    imds: FakeIMDS, source: AwsNoticeSource, body: bytes
) -> None:
    imds.preempt(in_seconds=120, legacy=False)  # only instance-action tells of it
    imds.malform_next(body, path=INSTANCE_ACTION)
    with pytest.raises(PortalError, match="unreadable"):
        source.poll(0)
    (notice,) = poll_until(source)  # the real one, once the answer is readable again
    assert notice.raw["action"] == "terminate"


def test_a_huge_answer_is_refused_without_reading_it(
    imds: FakeIMDS, source: AwsNoticeSource
) -> None:
    imds.malform_next(b"x" * (2 * 1024 * 1024), path=INSTANCE_ACTION)
    with pytest.raises(PortalError, match="more than"):
        source.poll(0)
    assert source.poll(0.1) == []


def test_a_truncated_answer_is_an_error(imds: FakeIMDS, source: AwsNoticeSource) -> None:
    imds.preempt(in_seconds=120, legacy=False)
    imds.truncate_next(path=INSTANCE_ACTION)
    with pytest.raises(PortalError, match="cut short"):
        source.poll(0)
    assert len(poll_until(source)) == 1


def test_a_slow_answer_times_out_and_a_dropped_connection_recovers(
    imds: FakeIMDS, empty_dmi: Path
) -> None:
    source = make(imds, empty_dmi, request_timeout_s=0.2)
    try:
        source.poll(0)
        imds.delay_next(0.5, path=INSTANCE_ACTION)
        with pytest.raises(PortalError, match="no answer within"):
            source.poll(0.06)
        imds.drop_next(path=INSTANCE_ACTION)
        with pytest.raises(PortalError):
            source.poll(0.06)
        imds.preempt(in_seconds=120)
        assert len(poll_until(source)) == 1
    finally:
        source.close()


def test_a_bad_maintenance_entry_is_skipped_and_logged(
    imds: FakeIMDS, source: AwsNoticeSource, caplog: pytest.LogCaptureFixture
) -> None:
    with imds.lock:
        imds.maintenance = [{"Code": "system-reboot", "State": "active"}]
    with caplog.at_level(logging.WARNING, "portal.notices.aws"):
        assert poll_until(source, timeout_s=0.3) == []
    assert any("no EventId" in r.getMessage() for r in caplog.records)


def test_one_log_line_per_distinct_problem(
    imds: FakeIMDS, source: AwsNoticeSource, caplog: pytest.LogCaptureFixture
) -> None:
    imds.fail_next(503, times=50, path=INSTANCE_ACTION)
    with caplog.at_level(logging.INFO, "portal.notices.aws"):
        for _ in range(8):
            with contextlib.suppress(PortalError):
                source.poll(0.06)
    lines = [r for r in caplog.records if "503" in r.getMessage()]
    assert len(lines) == 1


def test_machine_info(imds: FakeIMDS, source: AwsNoticeSource) -> None:
    info = source.machine_info()
    assert info == {
        "provider": "aws",
        "instance_id": "i-0123456789abcdef0",
        "instance_type": "m5.large",
        "capacity": "spot",
        "life_cycle": "spot",
        "notice_s": "120",
        "region": "us-east-1",
        "zone": "us-east-1a",
        "pool": "spot:aws:m5.large:us-east-1a",
    }
    requests = imds.count()
    source.machine_info()
    assert imds.count() == requests  # read once


def test_on_demand_machine_info(empty_dmi: Path) -> None:
    with FakeIMDS(life_cycle="on-demand", instance_type="g5.xlarge", zone="eu-west-1b") as imds:
        source = make(imds, empty_dmi)
        try:
            info = source.machine_info()
            assert (
                info["capacity"] == "on_demand"
                and info["pool"] == "on_demand:aws:g5.xlarge:eu-west-1b"
                and info["notice_s"] is None  # an on-demand machine gets no notice
            )
        finally:
            source.close()


def test_close_is_idempotent_and_final(source: AwsNoticeSource) -> None:
    source.close()
    source.close()
    with pytest.raises(PortalError, match="closed"):
        source.poll(0)


def test_termination_time_and_maintenance_paths_are_polled(
    imds: FakeIMDS, source: AwsNoticeSource
) -> None:
    source.poll(0)
    assert imds.count(TERMINATION_TIME) == 1 and imds.count(MAINTENANCE) == 1
