"""A job on a cloud VM whose machine disappears is declared lost the way the spec says, by its
provider's own API: a real node on the AWS metadata fake (a spot VM whose IMDS names a moto
instance) reports its instance; the machine then vanishes (its node and job stop, EC2 terminates
the instance); the control plane asks EC2 (moto's server, through the AWS plugin loaded from its
entry point) once a minute, hears "gone" twice, waits out the ten minutes (a fake clock, as the
rules are the point, not the waiting) and leaves the job its last complete checkpoint, from which
`portal resume` finishes it with the output of an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import PortalCli, wait_until

from portal.control import silence
from portal.control.plane import ControlPlane
from portal.core.domain import JobState
from portal.core.plugins import Plugins
from portal.core.settings import Settings
from portal.providers.aws.testing import FakeIMDS
from portal.testing import FakeClock

boto3 = pytest.importorskip("boto3", reason="portal-providers-aws[api] (boto3) is not installed")
moto_server = pytest.importorskip("moto.server", reason="moto[server] is not installed")

pytestmark = [pytest.mark.slow, pytest.mark.one_python]

REGION = "us-east-1"


@pytest.fixture
def ec2(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, str]]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "portal-test",
        "AWS_SECRET_ACCESS_KEY": "portal-test",
        "AWS_EC2_METADATA_DISABLED": "true",  # this process never asks the metadata address
        "NO_PROXY": "127.0.0.1",
    }.items():
        monkeypatch.setenv(name, value)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        yield boto3.client("ec2", region_name=REGION, endpoint_url=endpoint), endpoint
    finally:
        server.stop()


def _events(plane: ControlPlane, job: str) -> list[Any]:
    return [e for _, e in plane.store.events(job)]


def test_a_job_whose_spot_instance_is_terminated_is_lost_and_resumes(
    portal: PortalCli, ec2: tuple[Any, str]
) -> None:
    client, endpoint = ec2
    image = client.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    instance = client.run_instances(
        ImageId=image,
        InstanceType="c7i.large",
        MinCount=1,
        MaxCount=1,
        InstanceMarketOptions={"MarketType": "spot"},
    )["Instances"][0]["InstanceId"]
    expected = portal.plain("count.py", "7")
    with FakeIMDS(instance_type="c7i.large", life_cycle="spot", instance_id=instance) as imds:
        portal.env["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = imds.url
        job = portal("run", "--detach", "--checkpoint-every", "1s", "count.py", "7").stdout.strip()
        portal.wait_for_output(job, "step 30 ")
        plane = ControlPlane(
            Settings.load({"home": str(portal.home)}, environ={"AWS_ENDPOINT_URL_EC2": endpoint}),
            plugins=Plugins.load(),  # the AWS plugin from its entry point, as a user has it
        )
        try:
            wait_until(
                "a periodic checkpoint",
                lambda: any(e.kind == "checkpoint-periodic" for e in _events(plane, job)),
            )
            (machine,) = [e for e in _events(plane, job) if e.kind == "machine"]
            assert machine.data["instance_id"] == instance
            # The machine vanishes: its node and job stop answering, and EC2 ends the instance.
            attempt_dir = portal.home / "jobs" / job / "attempts" / "1"
            node = int((attempt_dir / "node.pid").read_text())
            (started,) = [e for e in _events(plane, job) if e.kind == "started"]
            stopped = [int(started.data["pid"]), node]
            for pid in stopped:
                os.kill(pid, signal.SIGSTOP)
            client.terminate_instances(InstanceIds=[instance])

            clock = FakeClock(start=plane.clock.now() + 40)  # 40 s unheard: silent
            plane.clock = clock
            assert silence.settle(plane, plane.job(job)).state is JobState.RUNNING
            clock.advance(60)
            assert silence.settle(plane, plane.job(job)).state is JobState.RUNNING
            checks = [e for e in _events(plane, job) if e.kind == "machine-check"]
            assert [c.data["gone"] for c in checks] == [True, True], checks
            assert checks[0].data["machine"] == instance
            assert f"aws says machine {instance} is gone" in checks[0].message
            clock.advance(600)  # ten minutes of silence
            latest = plane_latest(plane, job)
            assert silence.settle(plane, plane.job(job), latest).state is JobState.SUSPENDED
            (lost,) = [e for e in _events(plane, job) if e.kind == "lost-machine"]
            assert instance in lost.message and "portal resume" in lost.message
        finally:
            plane.store.close()
        for pid in stopped:
            os.kill(pid, signal.SIGKILL)
        del portal.env["AWS_EC2_METADATA_SERVICE_ENDPOINT"]
    status = json.loads(portal("status", job, "--json").stdout)
    assert status["state"] == "suspended"
    resumed = portal("resume", job, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert portal("logs", job).stdout == expected


def plane_latest(plane: ControlPlane, job: str) -> Any:
    """The job's last complete checkpoint, as the control plane's views find it."""
    from portal.control.views import JobViews

    return JobViews(plane).store.latest_complete(job)
