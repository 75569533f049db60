"""Portal plugin: the Azure notice source and catalog (entry point ``azure``).

Nothing of the provider is imported until Portal builds the source or reads the catalog.
"""

from portal.core.hookspecs import hookimpl
from portal.core.settings import positive_float, text
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
            parse=positive_float,
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
