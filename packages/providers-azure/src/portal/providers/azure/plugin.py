"""Portal plugin: the Azure notice source, the catalog, the VM check of the lost-job rules and
the VM-size listing (entry point ``azure``).

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
    "azure",
    source="portal.providers.azure.notices:AzureNoticeSource.from_context",
    catalog="portal.providers.azure.catalog:load_machine_types",
    source_description="Azure Spot eviction (Preempt) and Terminate/Reboot/Redeploy from Scheduled "
    "Events",
    settings=[
        SettingSpec(
            name="azure.management_endpoint",
            parse=text,
            env="PORTAL_AZURE_MANAGEMENT_ENDPOINT",
            description="Resource Manager address the lost-job check asks "
            "(default: https://management.azure.com)",
        ),
        SettingSpec(
            name="azure.subscription",
            parse=text,
            env="AZURE_SUBSCRIPTION_ID",
            description="the subscription whose resource SKUs size a VM no catalog knows",
        ),
        SettingSpec(
            name="azure.sku_location",
            parse=text,
            default="eastus",
            description="the region whose resource SKUs are listed (sizes are alike everywhere)",
        ),
        SettingSpec(
            name="azure.metadata_endpoint",
            parse=text,
            env="PORTAL_AZURE_METADATA_ENDPOINT",
            description="IMDS's address, for a test endpoint (default: 169.254.169.254 on Azure)",
        ),
        SettingSpec(
            name="azure.vm_name",
            parse=text,
            description="the name Scheduled Events give this VM (default: compute.name)",
        ),
        SettingSpec(
            name="azure.poll_interval_s",
            parse=seconds,
            default=1.0,
            description="seconds between two reads of Scheduled Events (0.2 s at least)",
        ),
    ],
    catalog_description="common Azure spot VM sizes (vCPUs, memory, GPUs)",
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
    if provider != "azure":  # every other machine costs nothing here
        return None
    from portal.providers.azure.machines import machine_exists

    return machine_exists(provider, facts, settings)


@hookimpl
def portal_machine_vcpus(
    provider: str, machine_type: str, settings: Mapping[str, Any]
) -> int | None:
    if provider != "azure" or not settings.get("azure.subscription"):
        return None
    from portal.providers.azure.machines import sku_vcpus

    endpoint = settings.get("azure.management_endpoint")
    return sku_vcpus(
        machine_type,
        subscription=str(settings["azure.subscription"]),
        location=str(settings.get("azure.sku_location") or "eastus"),
        endpoint=str(endpoint) if endpoint else None,
    )
