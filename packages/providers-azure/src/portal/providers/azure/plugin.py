"""Portal plugin: the Azure notice source and catalog (entry point ``azure``).

Nothing of the provider is imported until Portal builds the source or reads the catalog.
"""

from portal.core.hookspecs import hookimpl
from portal.core.specs import CatalogSpec, NoticeSourceSpec
from portal.providers.base.registration import provider_specs

SPECS = provider_specs(
    "azure",
    source="portal.providers.azure.notices:AzureNoticeSource.from_context",
    catalog="portal.providers.azure.catalog:load_machine_types",
    source_description="Azure Spot eviction (Preempt) and Terminate/Reboot/Redeploy from Scheduled "
    "Events",
    catalog_description="common Azure spot VM sizes (vCPUs, memory, GPUs)",
)


@hookimpl
def portal_notice_sources() -> list[NoticeSourceSpec]:
    return list(SPECS.sources)


@hookimpl
def portal_catalogs() -> list[CatalogSpec]:
    return list(SPECS.catalogs)
