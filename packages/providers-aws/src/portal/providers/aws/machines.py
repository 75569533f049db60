"""What Portal asks EC2's API: whether an instance still exists (the lost-job rules' question,
``portal_machine_exists``, about once a minute while a job's node is silent), and how many vCPUs
a type no catalog knows has (``portal_machine_vcpus``: DescribeInstanceTypes).

EC2's DescribeInstances names the instance's state. ``pending`` and ``running`` are "still
there"; ``shutting-down``, ``terminated``, ``stopping`` and ``stopped`` are "gone" for the job (a
stopped spot instance keeps its disk, never its memory: the job's process is gone with it), and
so is an id EC2 no longer knows (``InvalidInstanceID.NotFound``: a terminated instance drops out
of the listing after about an hour). Anything else (no credentials, a refused or failed call, a
malformed id) is "cannot tell" (None), never "gone": a question that failed must not end a job.

The call goes through boto3 (the ``api`` extra: ``pip install portal-providers-aws[api]``), with
the control plane's own AWS credentials (the standard chain: variables, profile, role) and the
region the node reported; ``aws.ec2_endpoint`` (``AWS_ENDPOINT_URL_EC2``) points it at a private
endpoint or an emulator.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from portal.providers.base.sdk import sdk_missing

__all__ = ["GONE_STATES", "instance_exists", "instance_type_vcpus", "machine_exists"]

log = logging.getLogger("portal.providers.aws")

#: Instance states in which the job's process cannot be running any more.
GONE_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped"})
#: Error codes that mean EC2 does not know the instance (any more).
_NOT_FOUND = frozenset({"InvalidInstanceID.NotFound"})
EXTRA = "portal-providers-aws[api]"


def _ec2(region: str | None, endpoint: str | None) -> Any:
    """An EC2 client in ``region`` (else the one boto3 would use, else us-east-1: instance types
    are alike in every region), or None (said once) where boto3 is not installed."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError as exc:
        sdk_missing(exc, api="EC2's API", extra=EXTRA)
        return None
    config = Config(
        connect_timeout=5, read_timeout=10, retries={"max_attempts": 2, "mode": "standard"}
    )
    region = region or boto3.session.Session().region_name or "us-east-1"
    return boto3.client("ec2", region_name=region, endpoint_url=endpoint or None, config=config)


def instance_type_vcpus(
    name: str, *, region: str | None = None, endpoint: str | None = None
) -> int | None:
    """EC2's ``DefaultVCpus`` of instance type ``name``, or None when it cannot say (an unknown
    type, no credentials, no answer)."""
    client = _ec2(region, endpoint)
    if client is None:
        return None
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        reply = client.describe_instance_types(InstanceTypes=[name])
    except (ClientError, BotoCoreError, ValueError) as exc:
        log.warning("EC2 could not list instance type %s: %s", name, exc)
        return None
    for found in reply.get("InstanceTypes", []):
        if found.get("InstanceType") == name:
            vcpus = found.get("VCpuInfo", {}).get("DefaultVCpus")
            return int(vcpus) if vcpus else None
    return None


def instance_exists(
    instance_id: str, *, region: str | None, endpoint: str | None = None
) -> bool | None:
    """EC2's answer for ``instance_id`` in ``region``: True, False, or None (cannot tell)."""
    client = _ec2(region, endpoint)
    if client is None:
        return None
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        reply = client.describe_instances(InstanceIds=[instance_id])
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in _NOT_FOUND:
            return False
        log.warning("EC2 could not say whether instance %s exists: %s", instance_id, exc)
        return None
    except (BotoCoreError, ValueError) as exc:  # no credentials, no region, no answer
        log.warning("EC2 could not be asked whether instance %s exists: %s", instance_id, exc)
        return None
    states = [
        str(instance.get("State", {}).get("Name", ""))
        for reservation in reply.get("Reservations", [])
        for instance in reservation.get("Instances", [])
        if instance.get("InstanceId") == instance_id
    ]
    if not states:
        return False
    return states[0] not in GONE_STATES


def machine_exists(
    provider: str, machine: str, facts: Mapping[str, str], settings: Mapping[str, Any]
) -> bool | None:
    """The hook's answer: only for an AWS machine whose node reported its instance id."""
    if provider != "aws":
        return None
    instance_id = facts.get("instance_id") or (machine if machine.startswith("i-") else "")
    if not instance_id:
        return None
    endpoint = settings.get("aws.ec2_endpoint")
    return instance_exists(
        instance_id, region=facts.get("region"), endpoint=str(endpoint) if endpoint else None
    )
