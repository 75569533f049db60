"""The local notice source (portal-providers-base's, found through its entry point) passes the
notice-source contract."""

from __future__ import annotations

from pathlib import Path

import pytest

from portal.core.errors import InvalidArgumentError
from portal.core.plugins import Plugins, get_plugin_manager
from portal.core.specs import NoticeSource, NoticeSourceContext
from portal.providers.local import (
    NOTICE_DIR_ENV,
    LocalNoticeSource,
    deliver_notice,
    withdraw_notice,
)
from portal.testing import FakeClock, NoticeSourceContract


class TestLocalNoticeSource(NoticeSourceContract):
    @pytest.fixture(autouse=True)
    def _dir(self, tmp_path: Path) -> None:
        self.dir = tmp_path / "notices"
        self.delivered: list[str] = []

    def make_source(self) -> NoticeSource:
        return LocalNoticeSource(self.dir)

    def announce(self, source: NoticeSource, seconds: float) -> None:
        self.delivered.append(deliver_notice(self.dir, seconds=seconds).id)

    def withdraw(self, source: NoticeSource) -> bool:
        return withdraw_notice(self.dir, self.delivered.pop())


def test_factory_reads_the_directory_from_the_environment(tmp_path: Path) -> None:
    plugins = Plugins(get_plugin_manager(environ={}))  # the installed entry points
    spec = plugins.notice_source("local")
    assert plugins.distribution_of("local") == "portal-providers-base"
    src = spec.factory(NoticeSourceContext(environ={NOTICE_DIR_ENV: str(tmp_path)}))
    assert src.detect()
    assert not spec.factory(NoticeSourceContext()).detect()


@pytest.mark.parametrize("seconds", [0, -1, float("nan"), float("inf"), 1e300, 366 * 86400 + 1])
def test_bad_notice_length(tmp_path: Path, seconds: float) -> None:
    """Issue 41, item 1: ``inf`` was delivered, and the node died formatting its deadline."""
    with pytest.raises(InvalidArgumentError, match="--seconds"):
        deliver_notice(tmp_path, seconds=seconds)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "body",
    [
        "{not json",
        '{"id": "x", "deadline": Infinity}',
        '{"id": "x", "deadline": NaN}',
        '{"id": "x", "deadline": 1e300}',
        '{"id": "x", "deadline": -5}',
        '{"id": "x"}',
    ],
)
def test_a_notice_file_that_cannot_be_read_is_set_aside_and_never_read_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, body: str
) -> None:
    src = LocalNoticeSource(tmp_path, clock=FakeClock())
    (tmp_path / "bad.json").write_text(body)
    assert src.poll(0) == [] and src.poll(0) == []
    assert caplog.text.count("which cannot be read (kept as bad.json.unreadable)") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json.unreadable"]
    assert LocalNoticeSource(tmp_path, clock=FakeClock()).poll(0) == []  # a later attempt's
    clock = FakeClock(start=500.0)
    notice = deliver_notice(tmp_path, seconds=30, clock=clock)
    (got,) = src.poll(0)
    assert got.id == notice.id and got.deadline == 530.0


def test_withdraw_unknown() -> None:
    assert withdraw_notice("/nonexistent-dir-for-portal", "x") is False
