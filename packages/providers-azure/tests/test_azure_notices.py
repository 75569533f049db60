"""The Azure notice source against the Scheduled Events conformance fake: contract and edge cases."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from portal.core.domain import Notice, NoticeKind
from portal.core.errors import PortalError
from portal.core.specs import NoticeSource, NoticeSourceContext
from portal.providers.azure.notices import AzureNoticeSource
from portal.providers.azure.testing import EVENTS_PATH, FakeAzureMetadata
from portal.providers.base.testing import loopback_only
from portal.testing import FakeClock, NoticeSourceContract

FAST = {"poll_interval_s": 0.2, "request_timeout_s": 1.0}


@pytest.fixture(autouse=True)
def _no_real_network() -> Iterator[None]:
    with loopback_only():
        yield


@pytest.fixture
def azure() -> Iterator[FakeAzureMetadata]:
    with FakeAzureMetadata(vm_name="vm-1") as fake:
        yield fake


def make(azure: FakeAzureMetadata, dmi: Path, **kwargs: Any) -> AzureNoticeSource:
    return AzureNoticeSource(endpoint=azure.url, dmi_dir=dmi, **{**FAST, **kwargs})


@pytest.fixture
def source(azure: FakeAzureMetadata, tmp_path: Path) -> Iterator[AzureNoticeSource]:
    src = make(azure, tmp_path)
    yield src
    src.close()


def poll_until(source: NoticeSource, want: int = 1, timeout_s: float = 3.0) -> list[Notice]:
    found: list[Notice] = []
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and len(found) < want:
        with contextlib.suppress(PortalError):
            found.extend(source.poll(0.1))
    return found


class TestAzureContract(NoticeSourceContract):
    @pytest.fixture(autouse=True)
    def _fake(self, tmp_path: Path) -> Iterator[None]:
        with loopback_only(), FakeAzureMetadata() as fake:
            self.fake = fake
            self.dmi = tmp_path
            yield

    def make_source(self) -> NoticeSource:
        return make(self.fake, self.dmi)

    def announce(self, source: NoticeSource, seconds: float) -> None:
        self.fake.preempt(in_seconds=seconds)

    def withdraw(self, source: NoticeSource) -> bool:
        self.fake.cancel()
        return True


# --- detection -------------------------------------------------------------------------------


def test_detects_azure_from_the_asset_tag(tmp_path: Path) -> None:
    (tmp_path / "chassis_asset_tag").write_text("7783-7084-3265-9085-8269-3286-77\n")
    (tmp_path / "sys_vendor").write_text("Microsoft Corporation\n")
    assert AzureNoticeSource(dmi_dir=tmp_path).detect() is True


def test_hyper_v_alone_is_not_azure_and_sends_nothing(tmp_path: Path) -> None:
    (tmp_path / "sys_vendor").write_text("Microsoft Corporation\n")
    source = AzureNoticeSource(dmi_dir=tmp_path)
    try:
        assert source.detect() is False
        with pytest.raises(PortalError, match="PORTAL_AZURE_METADATA_ENDPOINT"):
            source.poll(0)
    finally:
        source.close()


def test_override_from_the_context_environ(azure: FakeAzureMetadata, tmp_path: Path) -> None:
    ctx = NoticeSourceContext(
        settings={"dmi_dir": str(tmp_path)}, environ={"PORTAL_AZURE_METADATA_ENDPOINT": azure.url}
    )
    source = AzureNoticeSource.from_context(ctx)
    try:
        assert source.detect() and source.poll(0) == []
    finally:
        source.close()
    request = azure.requests[-1]
    assert request.header("metadata") == "true" and request.query["api-version"] == "2020-07-01"


def test_the_fake_refuses_requests_without_the_metadata_header(azure: FakeAzureMetadata) -> None:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", azure.port, timeout=5)
    try:
        conn.request("GET", EVENTS_PATH + "?api-version=2020-07-01")
        assert conn.getresponse().status == 400
    finally:
        conn.close()


# --- events ---------------------------------------------------------------------------------


def test_preempt_with_its_not_before_as_deadline(
    azure: FakeAzureMetadata, source: AzureNoticeSource
) -> None:
    event_id = azure.preempt(in_seconds=30)
    (notice,) = poll_until(source)
    assert notice.id == f"azure-{event_id}" and notice.kind is NoticeKind.PREEMPTION
    assert 28 <= notice.deadline - time.time() <= 31
    assert notice.raw["EventType"] == "Preempt"


@pytest.mark.parametrize("event_type", ["Terminate", "Reboot", "Redeploy"])
def test_terminate_reboot_redeploy_are_maintenance(
    azure: FakeAzureMetadata, source: AzureNoticeSource, event_type: str
) -> None:
    azure.add_event(event_type, in_seconds=600)
    (notice,) = poll_until(source)
    assert notice.kind is NoticeKind.MAINTENANCE


def test_freeze_and_other_vms_events_are_not_notices(
    azure: FakeAzureMetadata, source: AzureNoticeSource
) -> None:
    azure.add_event("Freeze")
    azure.preempt(resources=["vm-2"])
    azure.preempt(resources=["vmss_3", "vm-10"])
    assert poll_until(source, timeout_s=0.5) == []
    azure.preempt(resources=["vm-2", "VM-1"])  # names compare case-insensitively
    assert len(poll_until(source)) == 1


def test_not_before_emptied_on_start_is_the_same_notice(
    azure: FakeAzureMetadata, source: AzureNoticeSource
) -> None:
    event_id = azure.preempt(in_seconds=30)
    (notice,) = poll_until(source)
    azure.start_event(event_id)
    assert poll_until(source, timeout_s=0.5) == []
    assert source._reported[event_id].deadline == notice.deadline


def test_an_event_first_seen_started_is_due_now(
    azure: FakeAzureMetadata, source: AzureNoticeSource
) -> None:
    azure.add_event("Preempt", status="Started")
    (notice,) = poll_until(source)
    assert notice.notice_s == 0.0


def test_a_vanished_event_is_withdrawn_once_the_incarnation_moves(
    azure: FakeAzureMetadata, source: AzureNoticeSource
) -> None:
    event_id = azure.preempt()
    (notice,) = poll_until(source)
    azure.remove(event_id, bump_incarnation=False)  # an inconsistent answer: keep the notice
    assert poll_until(source, timeout_s=0.5) == []
    with azure.lock:
        azure.incarnation += 1
    (withdrawn,) = poll_until(source)
    assert (withdrawn.id, withdrawn.cancelled) == (notice.id, True)
    assert poll_until(source, timeout_s=0.5) == []


def test_acknowledge_starts_the_event(azure: FakeAzureMetadata, source: AzureNoticeSource) -> None:
    event_id = azure.preempt()
    (notice,) = poll_until(source)
    source.acknowledge(notice)
    assert azure.acknowledged == [event_id]
    post = next(r for r in azure.requests if r.method == "POST")
    assert json.loads(post.body) == {"StartRequests": [{"EventId": event_id}]}
    assert post.header("metadata") == "true"
    assert poll_until(source, timeout_s=0.5) == []  # started: the same notice


def test_acknowledging_another_providers_notice_is_refused(source: AzureNoticeSource) -> None:
    other = Notice(
        id="aws-1", source="aws", provider="aws", kind="preemption", deadline=1, seen_at=0
    )
    with pytest.raises(PortalError, match="not an Azure"):
        source.acknowledge(other)


def test_a_failed_acknowledgement_raises(
    azure: FakeAzureMetadata, source: AzureNoticeSource
) -> None:
    azure.preempt()
    (notice,) = poll_until(source)
    azure.fail_next(500, path=EVENTS_PATH)
    with pytest.raises(PortalError, match="500"):
        source.acknowledge(notice)


def test_vm_name_setting_overrides_compute_name(azure: FakeAzureMetadata, tmp_path: Path) -> None:
    source = make(azure, tmp_path, vm_name="vmss_7")
    try:
        azure.preempt(resources=["vmss_7"])
        assert len(poll_until(source)) == 1
        assert azure.count("/metadata/instance") == 0
    finally:
        source.close()


@pytest.mark.parametrize("unreadable", ["no name", "instance document fails"])
def test_when_this_vms_name_cannot_be_read_every_preempt_is_taken_as_its_own(
    azure: FakeAzureMetadata, tmp_path: Path, caplog: pytest.LogCaptureFixture, unreadable: str
) -> None:
    """Issue 41, item 19: the source raised at every poll and no notice was ever taken. A
    neighbour's event taken as this VM's costs a needless pause; a missed one, the job."""
    if unreadable == "no name":
        azure.compute["name"] = ""
    else:
        azure.fail_next(500, path="/metadata/instance", times=1000)
    source = make(azure, tmp_path)
    try:
        azure.preempt(resources=["some-neighbour"])
        (notice,) = poll_until(source)
        assert notice.kind is NoticeKind.PREEMPTION
        assert (
            caplog.text.count("every Preempt, Terminate, Reboot and Redeploy event is taken") == 1
        )
        assert "taken as this VM's: its name is unknown" in caplog.text
    finally:
        source.close()


def test_clock_skew_is_converted(tmp_path: Path) -> None:
    with FakeAzureMetadata(vm_name="vm-1", skew_s=-900.0) as azure:  # Azure 15 min behind us
        source = make(azure, tmp_path)
        try:
            azure.preempt(in_seconds=30)
            (notice,) = poll_until(source)
            assert 27 <= notice.deadline - time.time() <= 31
        finally:
            source.close()


def test_deadlines_follow_an_injected_clock(azure: FakeAzureMetadata, tmp_path: Path) -> None:
    start = float(int(time.time()) + 1200)  # this machine's clock, 20 minutes ahead of Azure's
    clock = FakeClock(start=start)
    source = make(azure, tmp_path, clock=clock)
    try:
        azure.preempt(in_seconds=30)
        (notice,) = source.poll(0)
        assert notice.seen_at == start and 28 <= notice.notice_s <= 31
    finally:
        source.close()


# --- bad answers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"<html>gateway</html>",
        b'{"DocumentIncarnation": 3',
        b'{"Events": []}',
        b'{"DocumentIncarnation": "3", "Events": []}',
        b"[]",
        b'{"DocumentIncarnation": 3}',
    ],
)
def test_an_unreadable_document_is_an_error_and_withdraws_nothing(
    azure: FakeAzureMetadata, source: AzureNoticeSource, body: bytes
) -> None:
    azure.preempt()
    assert len(poll_until(source)) == 1
    azure.cancel()
    azure.malform_next(body, path=EVENTS_PATH, content_type="text/html")
    time.sleep(0.2)
    with pytest.raises(PortalError, match="unreadable"):
        source.poll(0.3)
    (withdrawn,) = poll_until(source)  # the real document, once readable, withdraws it
    assert withdrawn.cancelled


def test_a_bad_event_entry_is_skipped_not_the_document(
    azure: FakeAzureMetadata, source: AzureNoticeSource
) -> None:
    with azure.lock:
        azure.events.append({"EventType": "Preempt", "Resources": ["vm-1"]})  # no EventId
        azure.events.append(
            {"EventId": "x", "EventType": "Preempt", "Resources": ["vm-1"], "NotBefore": "tomorrow"}
        )
    azure.preempt()
    assert len(poll_until(source)) == 1


def test_rate_limited_backs_off(azure: FakeAzureMetadata, tmp_path: Path) -> None:
    clock = FakeClock()
    source = make(azure, tmp_path, clock=clock, poll_interval_s=1.0)
    try:
        source.poll(0)
        clock.advance(1.0)
        azure.fail_next(429, path=EVENTS_PATH)
        with pytest.raises(PortalError, match="429"):
            source.poll(0)
        seen = azure.count(EVENTS_PATH)
        clock.advance(3.0)
        source.poll(0)
        assert azure.count(EVENTS_PATH) == seen
        clock.advance(2.5)
        source.poll(0)
        assert azure.count(EVENTS_PATH) == seen + 1
    finally:
        source.close()


def test_the_fakes_rate_limit_is_respected_by_the_default_interval(tmp_path: Path) -> None:
    with FakeAzureMetadata(vm_name="vm-1", rate_limit_per_s=3) as azure:
        source = make(azure, tmp_path, poll_interval_s=1.0)
        try:
            end = time.monotonic() + 1.5
            while time.monotonic() < end:
                source.poll(0.1)  # raises on a 429
            assert azure.count(EVENTS_PATH) == 2
        finally:
            source.close()


def test_a_huge_or_slow_answer_is_an_error(azure: FakeAzureMetadata, tmp_path: Path) -> None:
    source = make(azure, tmp_path, request_timeout_s=0.3, first_request_timeout_s=0.3)
    try:
        source.poll(0)
        azure.malform_next(b"[" * (1024 * 1024), path=EVENTS_PATH)
        time.sleep(0.2)
        with pytest.raises(PortalError, match="more than"):
            source.poll(0)
        azure.delay_next(0.6, path=EVENTS_PATH)
        time.sleep(0.2)
        with pytest.raises(PortalError, match="no answer within"):
            source.poll(0)
        azure.preempt()
        assert len(poll_until(source)) == 1
    finally:
        source.close()


def test_a_silent_first_request_explains_the_two_minute_start(
    azure: FakeAzureMetadata, tmp_path: Path
) -> None:
    source = make(azure, tmp_path, first_request_timeout_s=0.3, vm_name="vm-1")
    azure.stop_answering()
    try:
        with pytest.raises(PortalError, match="two minutes"):
            source.poll(0)
    finally:
        azure.resume_answering()
        source.close()


def test_machine_info(azure: FakeAzureMetadata, source: AzureNoticeSource) -> None:
    assert source.machine_info() == {
        "provider": "azure",
        "instance_type": "Standard_D4s_v5",
        "capacity": "spot",
        "priority": "Spot",
        "eviction_policy": "Deallocate",
        "notice_s": "30",
        "region": "eastus",
        "zone": "eastus-1",
        "pool": "spot:azure:Standard_D4s_v5:eastus-1",
        "subscription": "00000000-0000-0000-0000-00000000cafe",
        "resource_group": "portal-test",
        "instance_name": "vm-1",
        "scale_set": None,
        "instance_id": "00000000-0000-0000-0000-000000000001",
    }


def test_regular_priority_is_on_demand(tmp_path: Path) -> None:
    with FakeAzureMetadata(priority="Regular", zone="") as azure:
        source = make(azure, tmp_path)
        try:
            info = source.machine_info()
            assert (
                info["capacity"] == "on_demand"
                and info["pool"] == "on_demand:azure:Standard_D4s_v5:eastus"
            )
        finally:
            source.close()
