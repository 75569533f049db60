"""The AWS answer to the lost-job rules' question, asked of a real EC2 API: moto's server on
127.0.0.1 (instances made, stopped and terminated through boto3, as EC2 does them)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from portal.core.plugins import Plugins
from portal.providers.aws import plugin
from portal.providers.aws.machines import instance_exists

boto3 = pytest.importorskip("boto3", reason="the api extra (boto3) is not installed")
moto_server = pytest.importorskip("moto.server", reason="moto[server] is not installed")

REGION = "us-east-1"


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Test credentials, and never the instance metadata address (boto3's last credential
    source) nor a proxy."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "portal-test",
        "AWS_SECRET_ACCESS_KEY": "portal-test",
        "AWS_EC2_METADATA_DISABLED": "true",
        "NO_PROXY": "127.0.0.1",
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_EC2", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def ec2_endpoint() -> Iterator[str]:
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=_free_port())
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def ec2(ec2_endpoint: str) -> Any:
    return boto3.client(
        "ec2",
        region_name=REGION,
        endpoint_url=ec2_endpoint,
        aws_access_key_id="portal-test",
        aws_secret_access_key="portal-test",
    )


def _launch(ec2: Any, *, spot: bool = True) -> str:
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    options: dict[str, Any] = {"InstanceMarketOptions": {"MarketType": "spot"}} if spot else {}
    reply = ec2.run_instances(
        ImageId=image, InstanceType="m5.large", MinCount=1, MaxCount=1, **options
    )
    return str(reply["Instances"][0]["InstanceId"])


def _plugins() -> Plugins:
    plugins = Plugins.load(autoload=False)
    plugins.pm.register(plugin, name="aws")
    return plugins


def _ask(instance: str, endpoint: str, *, plugins: Plugins | None = None) -> bool | None:
    """Through Portal's plugin manager, as the lost-job rules ask."""
    plugins = plugins or _plugins()
    facts = {"provider": "aws", "instance_id": instance, "region": REGION, "zone": "us-east-1a"}
    return plugins.machine_exists(
        "aws", instance, "/nonexistent", facts, {"aws.ec2_endpoint": endpoint}
    )


def test_a_running_instance_is_there(ec2: Any, ec2_endpoint: str) -> None:
    assert _ask(_launch(ec2), ec2_endpoint) is True


def test_a_terminated_spot_instance_is_gone(ec2: Any, ec2_endpoint: str) -> None:
    instance = _launch(ec2)
    ec2.terminate_instances(InstanceIds=[instance])
    assert _ask(instance, ec2_endpoint) is False


def test_a_stopped_instance_is_gone_for_the_job(ec2: Any, ec2_endpoint: str) -> None:
    """Its disk is kept, its memory is not: the job's process is gone with the stop."""
    instance = _launch(ec2, spot=False)
    ec2.stop_instances(InstanceIds=[instance])
    assert _ask(instance, ec2_endpoint) is False
    ec2.start_instances(InstanceIds=[instance])
    assert _ask(instance, ec2_endpoint) is True


def test_an_instance_ec2_does_not_know_is_gone(ec2_endpoint: str) -> None:
    assert _ask("i-0fedcba9876543210", ec2_endpoint) is False


def test_an_api_that_cannot_be_reached_never_says_gone() -> None:
    closed = f"http://127.0.0.1:{_free_port()}"
    assert instance_exists("i-0123456789abcdef0", region=REGION, endpoint=closed) is None
    assert _ask("i-0123456789abcdef0", closed) is None


def test_refused_credentials_never_say_gone(
    ec2: Any, ec2_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    instance = _launch(ec2)
    # No credentials at all: boto3's chain ends (the metadata address is off) and says so.
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # it keeps what it resolved before
    assert _ask(instance, ec2_endpoint) is None


def test_other_machines_are_not_aws_to_answer(ec2_endpoint: str) -> None:
    plugins = _plugins()
    settings = {"aws.ec2_endpoint": ec2_endpoint}
    assert plugins.machine_exists("gcp", "vm-1", "/h", {"instance_id": "1"}, settings) is None
    # An AWS machine whose node never said its instance id: cannot tell.
    assert plugins.machine_exists("aws", "local", "/h", {"region": REGION}, settings) is None


def test_the_endpoint_is_a_declared_setting() -> None:
    plugins = _plugins()
    spec = plugins.settings()["aws.ec2_endpoint"]
    assert spec.env == "AWS_ENDPOINT_URL_EC2"


def test_an_instance_type_no_catalog_knows_is_sized_by_ec2s_listing(ec2_endpoint: str) -> None:
    """portal_machine_vcpus: DescribeInstanceTypes' DefaultVCpus; a type EC2 does not know, or
    an API out of reach, is None (the type is then sized as its default class)."""
    plugins = _plugins()
    settings = {"aws.ec2_endpoint": ec2_endpoint}
    assert plugins.machine_vcpus("aws", "m5.24xlarge", settings) == 96
    assert plugins.machine_vcpus("aws", "c7i.large", settings) == 2
    assert plugins.machine_vcpus("aws", "zz9.mystery", settings) is None
    assert plugins.machine_vcpus("gcp", "n2-standard-4", settings) is None
    closed = {"aws.ec2_endpoint": f"http://127.0.0.1:{_free_port()}"}
    assert plugins.machine_vcpus("aws", "m5.24xlarge", closed) is None
