from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from portal.core.domain import (
    CapacityClass,
    CheckpointRef,
    CheckpointState,
    Job,
    JobState,
    MachineType,
    Notice,
    NoticeKind,
    Offer,
)

C7I = MachineType(provider="aws", name="c7i.large", vcpus=2, memory_gib=4)


def test_notice_length_and_cancel() -> None:
    n = Notice(
        id="n1", source="aws", provider="aws", kind="preemption", deadline=1120.0, seen_at=1000.0
    )
    assert n.kind is NoticeKind.PREEMPTION
    assert n.notice_s == 120.0
    assert n.remaining_s(1100.0) == 20.0
    assert n.remaining_s(2000.0) == 0.0
    cancelled = n.cancel()
    assert cancelled.cancelled and cancelled.id == n.id and not n.cancelled


def test_notice_is_frozen_and_raw_copied() -> None:
    raw = {"action": "terminate"}
    n = Notice(id="n", source="s", provider="p", kind="preemption", deadline=1, seen_at=0, raw=raw)
    raw["action"] = "stop"
    assert n.raw["action"] == "terminate"
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        n.id = "other"  # type: ignore[misc]


@given(st.text(), st.floats(allow_nan=False, allow_infinity=False))
def test_derive_id_is_stable(action: str, when: float) -> None:
    a = Notice.derive_id("aws", action, when)
    assert a == Notice.derive_id("aws", action, when)
    assert a.startswith("aws-")


def test_derive_id_differs() -> None:
    assert Notice.derive_id("aws", "terminate", "t1") != Notice.derive_id("aws", "terminate", "t2")


def test_invalid_values_are_refused() -> None:
    with pytest.raises(ValueError):
        Notice(id="", source="s", provider="p", kind="preemption", deadline=1, seen_at=0)
    with pytest.raises(ValueError):
        Notice(id="n", source="s", provider="p", kind="explosion", deadline=1, seen_at=0)
    with pytest.raises(ValueError):
        MachineType(provider="aws", name="x", vcpus=0, memory_gib=1)


def test_job_name_validation() -> None:
    job = Job(id="j1", name="train-1", script="t.py", workdir="/w", created_at=0)
    assert job.state is JobState.RUNNING and not job.state.is_final
    with pytest.raises(ValueError, match="job name"):
        Job(id="j1", name="has space", script="t.py", workdir="/w", created_at=0)
    assert attrs.evolve(job, state="done").state.is_final


def test_spot_offer_needs_a_notice() -> None:
    with pytest.raises(ValueError, match="spot but has no notice_s"):
        Offer(machine_type=C7I, region="us-east-1", capacity="spot", price_per_hour=0.03)
    offer = Offer(
        machine_type=C7I,
        region="us-east-1",
        capacity=CapacityClass.SPOT,
        price_per_hour=0.03,
        notice_s=120,
    )
    assert offer.describe() == "spot aws c7i.large (us-east-1)"
    assert offer.pool == "spot:aws:c7i.large:us-east-1"
    od = Offer(
        machine_type=C7I,
        region="us-east-1",
        zone="us-east-1a",
        capacity="on_demand",
        price_per_hour=0.09,
    )
    assert od.describe() == "on-demand aws c7i.large (us-east-1a)"


def test_checkpoint_ref_resumable() -> None:
    ref = CheckpointRef(job_id="j", checkpoint_id="c", url="file:///x", created_at=1)
    assert ref.resumable
    assert not attrs.evolve(ref, state=CheckpointState.INCOMPLETE).resumable


@pytest.mark.parametrize("when", [float("inf"), float("nan"), 1e300, -1.0, 253_402_300_800.0])
def test_a_notice_time_must_be_one_a_clock_can_print(when: float) -> None:
    """Issue 41, item 1: a node died formatting a deadline of ``inf``."""
    with pytest.raises(ValueError, match="between 1970 and the year 9999"):
        Notice(id="n", source="s", provider="p", kind="preemption", deadline=when, seen_at=0)
    with pytest.raises(ValueError, match="between 1970 and the year 9999"):
        Notice(id="n", source="s", provider="p", kind="preemption", deadline=1, seen_at=when)
