"""PollingNoticeSource, through the README's 30-line provider: the contract and the failures."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from providers_base_acme import PREEMPT_PATH, FakeAcme, load_example

from portal.core.domain import Notice, NoticeKind
from portal.core.errors import InvalidSettingError, PortalError
from portal.core.specs import NoticeSource, NoticeSourceContext
from portal.providers.base.polling import PollingNoticeSource
from portal.providers.base.testing import loopback_only
from portal.testing import FakeClock, NoticeSourceContract


@pytest.fixture(autouse=True)
def _no_real_network() -> Iterator[None]:
    with loopback_only():
        yield


@pytest.fixture
def fake() -> Iterator[FakeAcme]:
    with FakeAcme() as server:
        yield server


def make(fake: FakeAcme, dmi: Path, **kwargs: Any) -> PollingNoticeSource:
    source: PollingNoticeSource = load_example().AcmeNoticeSource(
        override=fake.url, dmi_dir=dmi, **kwargs
    )
    return source


@pytest.fixture
def source(fake: FakeAcme, tmp_path: Path) -> Iterator[PollingNoticeSource]:
    src = make(fake, tmp_path)
    yield src
    src.close()


def poll_until(source: NoticeSource, want: int = 1, timeout_s: float = 5.0) -> list[Notice]:
    found: list[Notice] = []
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and len(found) < want:
        with contextlib.suppress(PortalError):
            found.extend(source.poll(0.1))
    return found


class TestReadmeProviderContract(NoticeSourceContract):
    @pytest.fixture(autouse=True)
    def _fake(self, tmp_path: Path) -> Iterator[None]:
        with loopback_only(), FakeAcme() as server:
            self.fake = server
            self.dmi = tmp_path
            yield

    def make_source(self) -> NoticeSource:
        return make(self.fake, self.dmi)

    def announce(self, source: NoticeSource, seconds: float) -> None:
        self.fake.preempt(seconds)


def test_detects_its_platform_from_dmi_and_sends_nothing_off_it(tmp_path: Path) -> None:
    cls = load_example().AcmeNoticeSource
    (tmp_path / "sys_vendor").write_text("Acme\n")
    assert cls(dmi_dir=tmp_path).detect() is True
    (tmp_path / "sys_vendor").write_text("Amazon EC2\n")
    source = cls(dmi_dir=tmp_path)
    try:
        assert source.detect() is False
        with pytest.raises(PortalError, match="ACME_METADATA_ENDPOINT"):
            source.poll(0)
    finally:
        source.close()


def test_the_default_from_context_reads_the_setting_or_the_context_environ(
    fake: FakeAcme, tmp_path: Path
) -> None:
    cls = load_example().AcmeNoticeSource
    settings = {"dmi_dir": str(tmp_path)}
    assert cls.from_context(NoticeSourceContext(settings=settings)).detect() is False
    for context in (
        NoticeSourceContext(settings=settings, environ={"ACME_METADATA_ENDPOINT": fake.url}),
        NoticeSourceContext(settings={**settings, "acme.metadata_endpoint": fake.url}),
    ):
        source = cls.from_context(context)
        try:
            assert source.detect() and source.poll(0) == []
        finally:
            source.close()
    assert fake.count(PREEMPT_PATH) == 2


def test_a_notice_once_with_its_deadline_converted_from_a_skewed_clock(tmp_path: Path) -> None:
    with FakeAcme(skew_s=600.0) as fake:  # the service's clock is ten minutes ahead of ours
        source = make(fake, tmp_path, request_timeout_s=1.0)
        try:
            fake.preempt(120)
            (notice,) = poll_until(source)
            assert notice.kind is NoticeKind.PREEMPTION and notice.provider == "acme"
            assert 110 <= notice.deadline - time.time() <= 121
            assert source.poll(0) == []
        finally:
            source.close()


def test_a_rate_limit_backs_off_at_least_five_seconds(fake: FakeAcme, tmp_path: Path) -> None:
    clock = FakeClock()
    source = make(fake, tmp_path, clock=clock)
    try:
        source.poll(0)
        clock.advance(1.0)
        fake.fail_next(429, path=PREEMPT_PATH)
        with pytest.raises(PortalError, match="429"):
            source.poll(0)
        fake.clear_requests()
        clock.advance(3.0)
        source.poll(0)
        assert fake.count(PREEMPT_PATH) == 0
        clock.advance(2.5)
        source.poll(0)
        assert fake.count(PREEMPT_PATH) == 1
    finally:
        source.close()


def test_poll_sleeps_on_the_injected_clock_until_the_next_document_is_due(
    fake: FakeAcme, tmp_path: Path
) -> None:
    clock = FakeClock()
    source = make(fake, tmp_path, clock=clock)
    try:
        assert source.poll(3.5) == []  # reads at 0, 1, 2, 3 s of the fake clock; no real wait
        assert fake.count(PREEMPT_PATH) == 4 and clock.monotonic() == 3.5
    finally:
        source.close()


@pytest.mark.parametrize("body", [b"<html>gateway</html>", b"soon", b""])
def test_an_unreadable_answer_is_an_error_never_a_notice(
    fake: FakeAcme, source: PollingNoticeSource, body: bytes
) -> None:
    fake.preempt(60)
    fake.malform_next(body, path=PREEMPT_PATH)
    with pytest.raises(PortalError, match="unreadable"):
        source.poll(0)
    assert len(poll_until(source)) == 1


def test_the_status_error_names_the_service_the_url_and_the_status(
    fake: FakeAcme, source: PollingNoticeSource
) -> None:
    fake.fail_next(503, path=PREEMPT_PATH)
    with pytest.raises(PortalError) as info:
        source.poll(0)
    assert str(info.value).startswith(f"Acme metadata at {fake.url}{PREEMPT_PATH} answered")
    assert info.value.details == {"endpoint": f"{fake.url}{PREEMPT_PATH}", "status": 503}


def test_an_unreachable_service_is_an_error(tmp_path: Path) -> None:
    with FakeAcme() as gone:
        url = gone.url
    source = load_example().AcmeNoticeSource(override=url, dmi_dir=tmp_path)
    try:
        with pytest.raises(PortalError, match="connection refused"):
            source.poll(0)
    finally:
        source.close()


def test_one_log_line_per_distinct_problem_and_one_when_it_clears(
    fake: FakeAcme, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    source = make(fake, tmp_path, clock=clock)
    fake.fail_next(503, times=5, path=PREEMPT_PATH)
    try:
        with caplog.at_level(logging.INFO, "portal.notices.acme"):
            for _ in range(6):
                with contextlib.suppress(PortalError):
                    source.poll(0)
                clock.advance(1.0)
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len([m for m in warnings if "503" in m]) == 1
        assert [r.getMessage() for r in caplog.records if r.levelno == logging.INFO] == [
            f"recovered: {PREEMPT_PATH}:503"
        ]
    finally:
        source.close()


def test_close_is_final(source: PollingNoticeSource) -> None:
    source.close()
    with pytest.raises(PortalError, match="the Acme notice source is closed"):
        source.poll(0)


def test_a_bad_endpoint_override_is_a_setting_error_not_an_unreadable_answer(
    tmp_path: Path,
) -> None:
    source = load_example().AcmeNoticeSource(override="ftp://127.0.0.1/x", dmi_dir=tmp_path)
    with pytest.raises(InvalidSettingError, match="ACME_METADATA_ENDPOINT"):
        source.poll(0)
