"""Portal plugin: the Azure notice source and catalog (entry point ``azure``).

The factories import their modules on first use, so registering the plugin costs the host nothing
until it builds a source or reads the catalog.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from portal.core.hookspecs import hookimpl
from portal.core.specs import CatalogSpec, NoticeSourceContext, NoticeSourceSpec

if TYPE_CHECKING:
    from portal.core.domain import MachineType
    from portal.providers.azure.notices import AzureNoticeSource


def make_source(context: NoticeSourceContext) -> AzureNoticeSource:
    from portal.providers.azure.notices import AzureNoticeSource

    return AzureNoticeSource.from_context(context)


def machine_types() -> Iterable[MachineType]:
    from portal.providers.azure.catalog import load_machine_types

    return load_machine_types()


@hookimpl
def portal_notice_sources() -> list[NoticeSourceSpec]:
    return [
        NoticeSourceSpec(
            name="azure",
            provider="azure",
            factory=make_source,
            description="Azure Spot eviction (Preempt) and Terminate/Reboot/Redeploy from Scheduled "
            "Events",
        )
    ]


@hookimpl
def portal_catalogs() -> list[CatalogSpec]:
    return [
        CatalogSpec(
            name="azure",
            provider="azure",
            machine_types=machine_types,
            description="common Azure spot VM sizes (vCPUs, memory, GPUs)",
        )
    ]
