"""MetadataNoticeSource's shared parts: DMI, bookkeeping, worded errors, skew, clients."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from providers_base_acme import FakeAcme, load_example

from portal.core.domain import NoticeKind
from portal.providers.base.dmi import read_dmi
from portal.providers.base.metadata import Answer, MetadataUnavailable
from portal.providers.base.polling import PollingNoticeSource
from portal.providers.base.testing import loopback_only
from portal.testing import FakeClock


@pytest.fixture(autouse=True)
def _no_real_network() -> Iterator[None]:
    with loopback_only():
        yield


def acme(**kwargs: object) -> PollingNoticeSource:
    source: PollingNoticeSource = load_example().AcmeNoticeSource(**kwargs)
    return source


def test_read_dmi_gives_every_field_missing_ones_empty(tmp_path: Path) -> None:
    (tmp_path / "sys_vendor").write_text("Acme\n")
    (tmp_path / "product_uuid").mkdir()  # unreadable as a file
    dmi = read_dmi(tmp_path)
    assert dmi["sys_vendor"] == "Acme" and dmi["product_uuid"] == "" and dmi["bios_vendor"] == ""
    assert len(dmi) == 7


def test_each_notice_is_reported_once_and_withdrawn_once(tmp_path: Path) -> None:
    source = acme(dmi_dir=tmp_path, clock=FakeClock())
    notice = source.notice("n-1", NoticeKind.PREEMPTION, source.clock.now() + 30, {})
    assert source.report_once("event-1", notice) == [notice]
    assert source.report_once("event-1", notice) == []
    (withdrawn,) = source.withdraw_once("event-1", why="event-1 is gone")
    assert withdrawn.cancelled and withdrawn.id == "n-1"
    assert source.withdraw_once("event-1", why="again") == []
    assert source.report_once("event-1", notice) == [notice]  # the key is free again


def test_remembering_withdrawn_keys_never_reports_them_again(tmp_path: Path) -> None:
    source = acme(dmi_dir=tmp_path, clock=FakeClock())
    source.remember_withdrawn = True  # type: ignore[misc]
    notice = source.notice("n-1", NoticeKind.MAINTENANCE, source.clock.now() + 30, {})
    source.report_once("n-1", notice)
    assert len(source.withdraw_once("n-1", why="canceled")) == 1
    assert source.report_once("n-1", notice) == []
    assert source.withdraw_once("n-1", why="canceled") == []


def test_the_service_clock_is_converted_and_skew_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock(start=1_700_000_000.0)  # 2023-11-14 22:13:20 UTC
    source = acme(dmi_dir=tmp_path, clock=clock)
    answer = Answer(200, b"", {"date": "Tue, 14 Nov 2023 22:16:20 GMT"})  # 3 minutes ahead
    skew = answer.server_time() - clock.now()  # type: ignore[operator]
    assert skew == 180.0
    with caplog.at_level(logging.WARNING, "portal.notices.acme"):
        assert source.local_deadline(clock.now() + skew + 30, answer) == clock.now() + 30
        source.local_deadline(clock.now(), answer)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "differs from Acme metadata'" in lines[0]
    no_date = Answer(200, b"", {})
    assert source.local_deadline(clock.now() + 5, no_date) == clock.now() + 5  # no conversion


def test_a_date_far_from_this_clock_is_a_bad_header_and_moves_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A hostile or broken service's Date 57 years off must not put a 120 s notice there."""
    clock = FakeClock(start=1_700_000_000.0)
    source = acme(dmi_dir=tmp_path, clock=clock)
    far = Answer(200, b"", {"date": "Mon, 01 Jan 2080 00:00:00 GMT"})
    with caplog.at_level(logging.WARNING, "portal.notices.acme"):
        assert source.local_deadline(clock.now() + 120, far) == clock.now() + 120
    assert "taken as a bad header, not a skewed clock" in caplog.text


@pytest.mark.parametrize("stated", [0.0, 5.0, 253_402_300_799.0, 1_700_000_000.0 + 2 * 86_400])
def test_a_notice_time_more_than_a_day_away_is_malformed(tmp_path: Path, stated: float) -> None:
    """1970, 9999 or the day after tomorrow: no notice this machine can have."""
    source = acme(dmi_dir=tmp_path, clock=FakeClock(start=1_700_000_000.0))
    with pytest.raises(ValueError, match="is more than a day from this machine's clock"):
        source.local_deadline(stated, Answer(200, b"", {}))


def test_unavailable_words_a_status_from_the_hints(tmp_path: Path) -> None:
    source = acme(dmi_dir=tmp_path)
    error = source.unavailable(Answer(418, b"", {}), "http://x/y")
    assert isinstance(error, MetadataUnavailable)
    assert error.message == "Acme metadata at http://x/y answered HTTP 418; retrying"
    assert error.details == {"endpoint": "http://x/y", "status": 418}


def test_one_off_clients_are_closed_and_close_closes_the_rest(tmp_path: Path) -> None:
    with FakeAcme() as fake:
        source = acme(override=fake.url, dmi_dir=tmp_path)
        with source.one_off_client() as client:
            assert client.request("GET", "/other", timeout_s=1.0).status == 404
        assert source._clients == []
        shared = source.client()
        assert source.client() is shared
        source.close()
        source.close()
        with pytest.raises(MetadataUnavailable, match="closed"):
            shared.request("GET", "/", timeout_s=1.0)
