"""Portal plugin: the AWS notice source and the EC2 catalog (entry point ``aws``).

Nothing of the provider is imported until Portal builds the source or reads the catalog.
"""

from portal.core.hookspecs import hookimpl
from portal.core.specs import CatalogSpec, NoticeSourceSpec
from portal.providers.base.registration import provider_specs

SPECS = provider_specs(
    "aws",
    source="portal.providers.aws.notices:AwsNoticeSource.from_context",
    catalog="portal.providers.aws.catalog:load_machine_types",
    source_description="EC2 spot interruptions, rebalance recommendations and scheduled "
    "maintenance, from IMDSv2",
    catalog_description="common EC2 spot instance types (vCPUs, memory, GPUs)",
)


@hookimpl
def portal_notice_sources() -> list[NoticeSourceSpec]:
    return list(SPECS.sources)


@hookimpl
def portal_catalogs() -> list[CatalogSpec]:
    return list(SPECS.catalogs)
