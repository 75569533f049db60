"""Portal plugin: the GCP notice source and catalog (entry point ``gcp``).

Nothing of the provider is imported until Portal builds the source or reads the catalog.
"""

from portal.core.hookspecs import hookimpl
from portal.core.specs import CatalogSpec, NoticeSourceSpec
from portal.providers.base.registration import provider_specs

SPECS = provider_specs(
    "gcp",
    source="portal.providers.gcp.notices:GcpNoticeSource.from_context",
    catalog="portal.providers.gcp.catalog:load_machine_types",
    source_description="Compute Engine Spot/preemptible preemption and terminating host maintenance, "
    "from the metadata server (hanging GETs)",
    catalog_description="common Compute Engine spot machine types (vCPUs, memory, GPUs)",
)


@hookimpl
def portal_notice_sources() -> list[NoticeSourceSpec]:
    return list(SPECS.sources)


@hookimpl
def portal_catalogs() -> list[CatalogSpec]:
    return list(SPECS.catalogs)
