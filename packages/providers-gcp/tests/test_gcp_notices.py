"""The GCP notice source against the metadata server conformance fake: contract and edge cases."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from portal.core.domain import Notice, NoticeKind
from portal.core.errors import PortalError
from portal.core.specs import NoticeSource, NoticeSourceContext
from portal.providers.base.testing import loopback_only
from portal.providers.gcp.notices import GcpNoticeSource
from portal.providers.gcp.testing import FakeGCEMetadata
from portal.testing import FakeClock, NoticeSourceContract

PREEMPTED = "/computeMetadata/v1/instance/preempted"
MAINTENANCE = "/computeMetadata/v1/instance/maintenance-event"


@pytest.fixture(autouse=True)
def _no_real_network() -> Iterator[None]:
    with loopback_only():
        yield


@pytest.fixture
def gce() -> Iterator[FakeGCEMetadata]:
    with FakeGCEMetadata() as fake:
        yield fake


def make(gce: FakeGCEMetadata, dmi: Path, **kwargs: Any) -> GcpNoticeSource:
    return GcpNoticeSource(host=gce.host, dmi_dir=dmi, **kwargs)


@pytest.fixture
def source(gce: FakeGCEMetadata, tmp_path: Path) -> Iterator[GcpNoticeSource]:
    src = make(gce, tmp_path)
    yield src
    src.close()


def started(source: GcpNoticeSource, gce: FakeGCEMetadata) -> GcpNoticeSource:
    """Poll once and wait until both watchers hang, so a change is seen by a hanging GET."""
    assert source.poll(0.01) == []
    assert gce.wait_for_hanging(2)
    return source


def poll_until(source: NoticeSource, want: int = 1, timeout_s: float = 5.0) -> list[Notice]:
    found: list[Notice] = []
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and len(found) < want:
        with contextlib.suppress(PortalError):
            found.extend(source.poll(0.1))
    return found


class TestGcpContract(NoticeSourceContract):
    @pytest.fixture(autouse=True)
    def _fake(self, tmp_path: Path) -> Iterator[None]:
        with loopback_only(), FakeGCEMetadata() as fake:
            self.fake = fake
            self.dmi = tmp_path
            yield

    def make_source(self) -> NoticeSource:
        return make(self.fake, self.dmi)

    def announce(self, source: NoticeSource, seconds: float) -> None:
        # GCE states no deadline; the source's notice length stands for the platform's.
        assert isinstance(source, GcpNoticeSource)
        source.preemption_notice_s = seconds
        self.fake.preempt()

    def withdraw(self, source: NoticeSource) -> bool:
        self.fake.cancel()
        return True


# --- detection -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {"product_name": "Google Compute Engine"},
        {"sys_vendor": "Google"},
        {"bios_vendor": "Google"},
    ],
)
def test_detects_gce_from_dmi(tmp_path: Path, fields: dict[str, str]) -> None:
    for name, value in fields.items():
        (tmp_path / name).write_text(value + "\n")
    assert GcpNoticeSource(dmi_dir=tmp_path).detect() is True


def test_off_gce_without_override_it_sends_nothing(tmp_path: Path) -> None:
    (tmp_path / "sys_vendor").write_text("Amazon EC2\n")
    source = GcpNoticeSource(dmi_dir=tmp_path)
    try:
        assert source.detect() is False
        with pytest.raises(PortalError, match="GCE_METADATA_HOST"):
            source.poll(0)
    finally:
        source.close()


@pytest.mark.parametrize("variable", ["GCE_METADATA_HOST", "GCE_METADATA_IP"])
def test_override_from_the_context_environ(
    gce: FakeGCEMetadata, tmp_path: Path, variable: str
) -> None:
    ctx = NoticeSourceContext(settings={"dmi_dir": str(tmp_path)}, environ={variable: gce.host})
    source = GcpNoticeSource.from_context(ctx)
    try:
        assert source.detect() and source.poll(0.5) == []
    finally:
        source.close()
    assert gce.count(PREEMPTED) >= 1


# --- the protocol ------------------------------------------------------------------------------


def test_first_a_plain_get_then_hanging_gets_with_the_etag(
    gce: FakeGCEMetadata, source: GcpNoticeSource
) -> None:
    started(source, gce)
    gets = [r for r in gce.requests if r.path == PREEMPTED]
    assert gets[0].query == {} and gets[0].header("metadata-flavor") == "Google"
    hanging = gets[1]
    assert hanging.query["wait_for_change"] == "true"
    assert hanging.query["last_etag"] and hanging.query["timeout_sec"] == "30"


def test_a_notice_reaches_the_caller_within_100_ms(
    gce: FakeGCEMetadata, source: GcpNoticeSource
) -> None:
    started(source, gce)
    start = time.monotonic()
    gce.preempt()
    (notice,) = source.poll(2.0)
    assert time.monotonic() - start < 0.1
    assert notice.kind is NoticeKind.PREEMPTION and notice.notice_s == 30.0
    assert notice.raw["key"] == "instance/preempted" and notice.raw["value"] == "TRUE"


def test_a_node_restarted_mid_notice_sees_it_at_once(gce: FakeGCEMetadata, tmp_path: Path) -> None:
    gce.preempt()
    gce.maintenance()
    source = make(gce, tmp_path)
    try:
        kinds = {n.kind for n in poll_until(source, want=2)}
        assert kinds == {NoticeKind.PREEMPTION, NoticeKind.MAINTENANCE}
    finally:
        source.close()


def test_flapping_values_are_reported_as_they_happened(
    gce: FakeGCEMetadata, source: GcpNoticeSource
) -> None:
    started(source, gce)
    changes: list[Notice] = []
    for _ in range(3):
        gce.preempt()
        changes += poll_until(source)
        gce.cancel()
        changes += poll_until(source)
    assert [n.cancelled for n in changes] == [False, True] * 3
    ids = [n.id for n in changes]
    assert ids[0] == ids[1] and ids[2] == ids[3] and len(set(ids)) == 3


def test_fast_flaps_never_leave_a_withdrawn_notice_standing(
    gce: FakeGCEMetadata, source: GcpNoticeSource
) -> None:
    started(source, gce)
    for _ in range(10):
        gce.preempt()
        gce.cancel()
    time.sleep(0.3)
    changes = poll_until(source, want=100, timeout_s=0.5)
    active: set[str] = set()
    for notice in changes:
        if notice.cancelled:
            active.remove(notice.id)
        else:
            assert not active  # never two notices at once
            active.add(notice.id)
    assert not active


def test_maintenance_terminate_is_a_notice_migrate_is_not(
    gce: FakeGCEMetadata, source: GcpNoticeSource
) -> None:
    started(source, gce)
    gce.maintenance("MIGRATE_ON_HOST_MAINTENANCE")
    assert poll_until(source, timeout_s=0.3) == []
    gce.maintenance("TERMINATE_ON_HOST_MAINTENANCE")
    (notice,) = poll_until(source)
    assert notice.kind is NoticeKind.MAINTENANCE and notice.notice_s == 60.0
    gce.end_maintenance()
    (withdrawn,) = poll_until(source)
    assert (withdrawn.id, withdrawn.cancelled) == (notice.id, True)


def test_deadline_follows_an_injected_clock(gce: FakeGCEMetadata, tmp_path: Path) -> None:
    clock = FakeClock(start=5_000.0)
    gce.preempt()
    source = make(gce, tmp_path, clock=clock)
    try:
        (notice,) = source.poll(1.0)
        assert (notice.seen_at, notice.deadline) == (5_000.0, 5_030.0)
    finally:
        source.close()


# --- bad answers ---------------------------------------------------------------------------------


def test_503_during_maintenance_is_retried_and_the_notice_still_comes(
    gce: FakeGCEMetadata, source: GcpNoticeSource
) -> None:
    started(source, gce)
    gce.fail_next(503, times=2, path=PREEMPTED)
    gce.preempt()  # answers the hanging GET; the next two requests get 503
    assert len(poll_until(source)) == 1


def test_a_notice_during_an_outage_is_reported_after_it(
    gce: FakeGCEMetadata, tmp_path: Path
) -> None:
    source = make(gce, tmp_path, hang_s=1.0)
    try:
        started(source, gce)
        gce.fail_next(503, times=2, path=PREEMPTED)
        seen = gce.count(PREEMPTED)
        # The hanging GET times out (1 s); the watcher's next request meets the outage ...
        assert gce.wait_for(lambda: gce.count(PREEMPTED) > seen, 3.0)
        gce.preempt()  # ... and the value changes during it
        with pytest.raises(PortalError, match="503"):
            source.poll(0.2)
        assert len(poll_until(source, timeout_s=8)) == 1
    finally:
        source.close()


def test_errors_are_raised_from_poll_while_the_server_fails(
    gce: FakeGCEMetadata, tmp_path: Path
) -> None:
    gce.fail_next(503, times=100, path=PREEMPTED)
    source = make(gce, tmp_path)
    try:
        with pytest.raises(PortalError, match="503"):
            source.poll(0.5)
        gce.clear_faults()
        gce.preempt()
        assert len(poll_until(source)) == 1
    finally:
        source.close()


def test_403_names_the_stripped_header(gce: FakeGCEMetadata, tmp_path: Path) -> None:
    gce.fail_next(403, times=100, path=PREEMPTED)
    source = make(gce, tmp_path)
    try:
        with pytest.raises(PortalError, match="Metadata-Flavor"):
            source.poll(0.5)
    finally:
        source.close()


@pytest.mark.parametrize("body", [b"MAYBE", b"<html>proxy error</html>\x00\xff"])
def test_an_unreadable_value_is_an_error_never_a_notice(
    gce: FakeGCEMetadata, tmp_path: Path, body: bytes
) -> None:
    gce.malform_next(body, path=PREEMPTED, times=2)
    source = make(gce, tmp_path)
    try:
        with pytest.raises(PortalError):
            source.poll(0.5)
        assert poll_until(source, timeout_s=0.6) == []
    finally:
        source.close()


def test_an_answer_not_from_the_metadata_server_is_refused(
    gce: FakeGCEMetadata, tmp_path: Path
) -> None:
    # A 200 "TRUE" without Metadata-Flavor: Google is some other server (a proxy, a captive portal).
    gce.malform_next(b"TRUE", path=PREEMPTED, content_type="text/plain")
    source = make(gce, tmp_path)
    try:
        with pytest.raises(PortalError, match="not the GCE"):
            source.poll(0.5)
        assert poll_until(source, timeout_s=0.6) == []
    finally:
        source.close()


def test_a_server_that_stops_answering_is_an_error_then_recovers(
    gce: FakeGCEMetadata, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = make(gce, tmp_path, hang_s=1.0)
    try:
        started(source, gce)
        gce.stop_answering()
        with caplog.at_level(logging.WARNING, "portal.notices.gcp"), pytest.raises(PortalError):
            end = time.monotonic() + 10
            while time.monotonic() < end:
                source.poll(0.2)
        gce.resume_answering()
        gce.preempt()
        assert len(poll_until(source, timeout_s=8)) == 1
        assert len([r for r in caplog.records if "no answer" in r.getMessage()]) <= 2
    finally:
        source.close()


def test_close_interrupts_hanging_gets_at_once(gce: FakeGCEMetadata, tmp_path: Path) -> None:
    source = started(make(gce, tmp_path, hang_s=30.0), gce)
    start = time.monotonic()
    source.close()
    assert time.monotonic() - start < 1.0
    source.close()


def test_machine_info(gce: FakeGCEMetadata, source: GcpNoticeSource) -> None:
    assert source.machine_info() == {
        "provider": "gcp",
        "instance_type": "n2-standard-4",
        "capacity": "spot",
        "provisioning_model": "SPOT",
        "notice_s": "30",
        "region": "us-central1",
        "zone": "us-central1-a",
        "pool": "spot:gcp:n2-standard-4:us-central1-a",
        "project": "portal-test",
        "instance_name": "portal-test-vm",
        "instance_id": "1234567890123456789",
    }


def test_machine_info_falls_back_to_the_preemptible_flag(tmp_path: Path) -> None:
    with FakeGCEMetadata(provisioning_model=None, machine_type="g2-standard-8") as gce:
        source = make(gce, tmp_path)
        try:
            info = source.machine_info()
            assert info["capacity"] == "on_demand" and info["provisioning_model"] == "STANDARD"
            with gce.lock:
                gce.values["instance/scheduling/preemptible"] = "TRUE"
            source._machine = None
            assert source.machine_info()["capacity"] == "spot"
        finally:
            source.close()
