"""Portal plugin: the GCP notice source and catalog (entry point ``gcp``).

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
    from portal.providers.gcp.notices import GcpNoticeSource


def make_source(context: NoticeSourceContext) -> GcpNoticeSource:
    from portal.providers.gcp.notices import GcpNoticeSource

    return GcpNoticeSource.from_context(context)


def machine_types() -> Iterable[MachineType]:
    from portal.providers.gcp.catalog import load_machine_types

    return load_machine_types()


@hookimpl
def portal_notice_sources() -> list[NoticeSourceSpec]:
    return [
        NoticeSourceSpec(
            name="gcp",
            provider="gcp",
            factory=make_source,
            description="Compute Engine Spot/preemptible preemption and terminating host maintenance, "
            "from the metadata server (hanging GETs)",
        )
    ]


@hookimpl
def portal_catalogs() -> list[CatalogSpec]:
    return [
        CatalogSpec(
            name="gcp",
            provider="gcp",
            machine_types=machine_types,
            description="common Compute Engine spot machine types (vCPUs, memory, GPUs)",
        )
    ]
