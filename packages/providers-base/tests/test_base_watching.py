"""WatchingNoticeSource and HangingGetWatcher against a small hanging-GET service."""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from portal.core.domain import Notice, NoticeKind
from portal.core.errors import PortalError
from portal.providers.base.source import MetadataService
from portal.providers.base.testing import FakeHTTPServer, RecordedRequest, Reply, loopback_only
from portal.providers.base.watching import Seen, Watched, WatchingNoticeSource

FLAG = "/flag"


def etag_of(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:12]


class FakeFlags(FakeHTTPServer):
    """One value, ``FALSE`` or ``TRUE``; ``?wait=ETAG`` hangs until it differs (``hang`` s)."""

    def __init__(self) -> None:
        super().__init__()
        self.value = "FALSE"

    def set(self, value: str) -> None:
        with self.lock:
            self.value = value
        self.changed()

    def respond(self, request: RecordedRequest) -> Reply:
        if request.path != FLAG:
            return Reply(404)
        waited_on = request.query.get("wait")
        if waited_on is not None:
            hang = float(request.query.get("hang", "30"))
            self.wait_for(lambda: etag_of(self.value) != waited_on, hang)
        with self.lock:
            value = self.value
        return Reply(200, value.encode(), {"ETag": etag_of(value)})


def parse_flag(text: str) -> bool:
    if text.upper() not in ("TRUE", "FALSE"):
        raise ValueError(f"not TRUE or FALSE: {text[:20]!r}")
    return text.upper() == "TRUE"


class FlagNotices(WatchingNoticeSource):
    """A flag that, while TRUE, announces a preemption 30 s after it was seen."""

    name = "flags"
    metadata = MetadataService(
        provider="flags",
        cloud="Flags",
        platform="Flag Cloud",
        service="flag service",
        override_env="FLAGS_ENDPOINT",
        default_endpoint="http://169.254.169.254",
        on_platform=lambda dmi: False,
    )

    def watched(self) -> list[Watched]:
        return [Watched(FLAG, parse_flag)]

    def wait_query(self, etag: str, hang_s: int) -> str:
        return f"?wait={etag}&hang={hang_s}"

    def apply(self, seen: Seen) -> list[Notice]:
        if seen.value != "TRUE":
            return self.withdraw_once(seen.key, why=f"{seen.key}={seen.value}")
        notice = self.notice(
            Notice.derive_id("flags", seen.at),
            NoticeKind.PREEMPTION,
            seen.at + 30.0,
            {"etag": seen.etag},
            seen_at=seen.at,
        )
        return self.report_once(seen.key, notice)


@pytest.fixture(autouse=True)
def _no_real_network() -> Iterator[None]:
    with loopback_only():
        yield


@pytest.fixture
def fake() -> Iterator[FakeFlags]:
    with FakeFlags() as server:
        yield server


@pytest.fixture
def source(fake: FakeFlags, tmp_path: Path) -> Iterator[FlagNotices]:
    src = FlagNotices(override=fake.url, dmi_dir=tmp_path, hang_s=30.0)
    yield src
    src.close()


def hanging(fake: FakeFlags) -> bool:
    return fake.wait_for(lambda: any("wait" in r.query for r in fake.requests), 2.0)


def poll_until(source: FlagNotices, timeout_s: float = 5.0) -> list[Notice]:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        with contextlib.suppress(PortalError):
            found = list(source.poll(0.1))
            if found:
                return found
    return []


def test_a_change_reaches_poll_at_once_and_its_reversal_withdraws_it(
    fake: FakeFlags, source: FlagNotices
) -> None:
    assert source.poll(0.01) == [] and hanging(fake)
    first = fake.requests[0]
    assert first.query == {} and first.header("metadata-flavor") is None
    start = time.monotonic()
    fake.set("TRUE")
    (notice,) = source.poll(2.0)
    assert time.monotonic() - start < 0.5 and notice.notice_s == 30.0
    fake.set("FALSE")
    (withdrawn,) = poll_until(source)
    assert (withdrawn.id, withdrawn.cancelled) == (notice.id, True)


def test_errors_are_raised_from_poll_and_the_watcher_recovers(
    fake: FakeFlags, tmp_path: Path
) -> None:
    fake.fail_next(503, times=2, path=FLAG)
    source = FlagNotices(override=fake.url, dmi_dir=tmp_path)
    try:
        with pytest.raises(PortalError, match=r"flag service at .* answered HTTP 503"):
            source.poll(0.3)
        fake.set("TRUE")
        assert len(poll_until(source)) == 1
    finally:
        source.close()


def test_an_unreadable_value_is_an_error_never_a_notice(fake: FakeFlags, tmp_path: Path) -> None:
    fake.malform_next(b"MAYBE", path=FLAG)
    source = FlagNotices(override=fake.url, dmi_dir=tmp_path)
    try:
        with pytest.raises(PortalError, match="unreadable"):
            source.poll(0.3)
        assert poll_until(source, timeout_s=0.5) == []
    finally:
        source.close()


def test_close_interrupts_the_hanging_gets_at_once(fake: FakeFlags, source: FlagNotices) -> None:
    source.poll(0.01)
    assert hanging(fake)
    start = time.monotonic()
    source.close()
    assert time.monotonic() - start < 1.0
    source.close()
    assert source.poll(0.1) == []


def test_off_platform_without_override_no_watcher_starts(tmp_path: Path) -> None:
    source = FlagNotices(dmi_dir=tmp_path)
    try:
        with pytest.raises(PortalError, match="FLAGS_ENDPOINT"):
            source.poll(0)
    finally:
        source.close()
