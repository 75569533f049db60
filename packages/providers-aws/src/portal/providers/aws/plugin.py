"""Portal plugin: the AWS notice source, the EC2 catalog, the instance check of the lost-job
rules and the instance-type listing (entry point ``aws``).

Nothing of the provider is imported until Portal builds the source, reads the catalog or asks
about an instance.
"""

from collections.abc import Mapping
from typing import Any

from portal.core.hookspecs import hookimpl
from portal.core.settings import seconds, text
from portal.core.specs import CatalogSpec, NoticeSourceSpec, SettingSpec
from portal.providers.base.registration import provider_specs


def _token_ttl(value: object) -> int:
    try:
        seconds = int(str(value).strip())
    except ValueError:
        seconds = 0
    if not 1 <= seconds <= 21600:
        raise ValueError("expected a whole number of seconds from 1 to 21600")
    return seconds


SPECS = provider_specs(
    "aws",
    source="portal.providers.aws.notices:AwsNoticeSource.from_context",
    catalog="portal.providers.aws.catalog:load_machine_types",
    source_description="EC2 spot interruptions, rebalance recommendations and scheduled "
    "maintenance, from IMDSv2",
    settings=[
        SettingSpec(
            name="aws.metadata_endpoint",
            parse=text,
            env="AWS_EC2_METADATA_SERVICE_ENDPOINT",
            description="IMDS's address, for a test endpoint (default: 169.254.169.254 on EC2)",
        ),
        SettingSpec(
            name="aws.poll_interval_s",
            parse=seconds,
            default=1.0,
            description="seconds between two reads of spot/instance-action",
        ),
        SettingSpec(
            name="aws.slow_interval_s",
            parse=seconds,
            default=5.0,
            description="seconds between two reads of the slower documents (maintenance)",
        ),
        SettingSpec(
            name="aws.ec2_endpoint",
            parse=text,
            env="AWS_ENDPOINT_URL_EC2",
            description="EC2 API address Portal asks (lost-job check, instance types; default: "
            "the region's)",
        ),
        SettingSpec(
            name="aws.token_ttl_s",
            parse=_token_ttl,
            default=21600,
            description="lifetime of an IMDSv2 token, 1 to 21600 s",
        ),
    ],
    catalog_description="common EC2 spot instance types (vCPUs, memory, GPUs)",
)


@hookimpl
def portal_notice_sources() -> list[NoticeSourceSpec]:
    return list(SPECS.sources)


@hookimpl
def portal_catalogs() -> list[CatalogSpec]:
    return list(SPECS.catalogs)


@hookimpl
def portal_settings() -> list[SettingSpec]:
    return list(SPECS.settings)


@hookimpl
def portal_machine_exists(
    provider: str, machine: str, facts: Mapping[str, str], settings: Mapping[str, Any]
) -> bool | None:
    if provider != "aws":  # every other machine costs nothing here
        return None
    from portal.providers.aws.machines import machine_exists

    return machine_exists(provider, machine, facts, settings)


@hookimpl
def portal_machine_vcpus(
    provider: str, machine_type: str, settings: Mapping[str, Any]
) -> int | None:
    if provider != "aws":
        return None
    from portal.providers.aws.machines import instance_type_vcpus

    endpoint = settings.get("aws.ec2_endpoint")
    return instance_type_vcpus(machine_type, endpoint=str(endpoint) if endpoint else None)
