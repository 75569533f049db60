"""Small builders for the policies' tests: machine types, offers, jobs and measures, built
directly (no provider package needed)."""

from __future__ import annotations

from portal.core.domain import CapacityClass, Job, MachineType, Offer
from portal.core.specs import StateMeasure
from portal.policies import Bounds, Figure, RateBook, Sizer

GB = 1_000_000_000

C7I_LARGE = MachineType(provider="aws", name="c7i.large", vcpus=2, memory_gib=4)
M7I_2XL = MachineType(provider="aws", name="m7i.2xlarge", vcpus=8, memory_gib=32)
R7I_4XL = MachineType(provider="aws", name="r7i.4xlarge", vcpus=16, memory_gib=128)
G6_XL = MachineType(
    provider="aws", name="g6.xlarge", vcpus=4, memory_gib=16, gpus=1, gpu_model="L4"
)
N2_4 = MachineType(provider="gcp", name="n2-standard-4", vcpus=4, memory_gib=16)
A2_1G = MachineType(
    provider="gcp", name="a2-highgpu-1g", vcpus=12, memory_gib=85, gpus=1, gpu_model="A100 40GB"
)
CATALOG = (C7I_LARGE, M7I_2XL, R7I_4XL, G6_XL, N2_4, A2_1G)
NOTICE = {"aws": 120.0, "gcp": 30.0, "azure": 30.0}


def spot(machine: MachineType, region: str = "us-east-1", price: float = 0.05) -> Offer:
    return Offer(
        machine_type=machine,
        region=region,
        capacity=CapacityClass.SPOT,
        price_per_hour=price,
        notice_s=NOTICE.get(machine.provider, 120.0),
    )


def on_demand(machine: MachineType, region: str = "us-east-1", price: float = 0.2) -> Offer:
    return Offer(
        machine_type=machine, region=region, capacity=CapacityClass.ON_DEMAND, price_per_hour=price
    )


def job(
    memory_gib: float | None = None, job_id: str = "job-1", state_gib: float | None = None
) -> Job:
    return Job(
        id=job_id,
        script="train.py",
        workdir="/tmp/w",
        created_at=0.0,
        memory_gib=memory_gib,
        state_gib=state_gib,
    )


def checkpoint(total_bytes: float) -> StateMeasure:
    """A measure of ``total_bytes`` already including the tenth for growth."""
    return StateMeasure(bytes=int(total_bytes), figure=str(Figure.CHECKPOINT_AS_STORED))


def resident(total_bytes: float) -> StateMeasure:
    return StateMeasure(bytes=int(total_bytes), figure=str(Figure.RESIDENT_AND_GPU))


def bounds(rates: RateBook | None = None) -> Bounds:
    book = rates or RateBook()
    return Bounds(Sizer(CATALOG, rates=book), book)


def mixed_offers() -> list[Offer]:
    return [
        spot(C7I_LARGE, price=0.03),
        on_demand(C7I_LARGE, price=0.09),
        spot(M7I_2XL, price=0.14),
        on_demand(M7I_2XL, price=0.40),
        spot(R7I_4XL, price=0.37),
        on_demand(R7I_4XL, price=1.06),
        spot(N2_4, region="us-central1", price=0.06),
        on_demand(N2_4, region="us-central1", price=0.19),
        spot(G6_XL, price=0.28),
        on_demand(G6_XL, price=0.80),
    ]
