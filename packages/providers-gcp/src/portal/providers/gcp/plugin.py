"""Portal plugin: the GCP notice source, the catalog and the VM check of the lost-job rules
(entry point ``gcp``).

Nothing of the provider is imported until Portal builds the source, reads the catalog or asks
about a VM.
"""

from collections.abc import Mapping
from typing import Any

from portal.core.hookspecs import hookimpl
from portal.core.settings import seconds, text
from portal.core.specs import CatalogSpec, NoticeSourceSpec, SettingSpec
from portal.providers.base.registration import provider_specs

SPECS = provider_specs(
    "gcp",
    source="portal.providers.gcp.notices:GcpNoticeSource.from_context",
    catalog="portal.providers.gcp.catalog:load_machine_types",
    source_description="Compute Engine Spot/preemptible preemption and terminating host maintenance, "
    "from the metadata server (hanging GETs)",
    settings=[
        SettingSpec(
            name="gcp.compute_endpoint",
            parse=text,
            env="PORTAL_GCP_COMPUTE_ENDPOINT",
            description="Compute Engine API address the lost-job check asks "
            "(default: https://compute.googleapis.com)",
        ),
        SettingSpec(
            name="gcp.metadata_host",
            parse=text,
            env="GCE_METADATA_HOST",
            description="the metadata server as host[:port], for a test server",
        ),
        SettingSpec(
            name="gcp.hang_s",
            parse=seconds,
            default=30.0,
            description="seconds a hanging GET waits for a change",
        ),
        SettingSpec(
            name="gcp.preemption_notice_s",
            parse=seconds,
            default=30.0,
            description="the notice a preemption gives (30 s on Spot VMs)",
        ),
        SettingSpec(
            name="gcp.maintenance_notice_s",
            parse=seconds,
            default=60.0,
            description="the notice a terminating host maintenance gives",
        ),
    ],
    catalog_description="common Compute Engine spot machine types (vCPUs, memory, GPUs)",
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
    provider: str, facts: Mapping[str, str], settings: Mapping[str, Any]
) -> bool | None:
    if provider != "gcp":  # every other machine costs nothing here
        return None
    from portal.providers.gcp.machines import machine_exists

    return machine_exists(provider, facts, settings)
