"""Portal plugin: the AWS notice source and the EC2 catalog (entry point ``aws``).

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
    from portal.providers.aws.notices import AwsNoticeSource


def make_source(context: NoticeSourceContext) -> AwsNoticeSource:
    from portal.providers.aws.notices import AwsNoticeSource

    return AwsNoticeSource.from_context(context)


def machine_types() -> Iterable[MachineType]:
    from portal.providers.aws.catalog import load_machine_types

    return load_machine_types()


@hookimpl
def portal_notice_sources() -> list[NoticeSourceSpec]:
    return [
        NoticeSourceSpec(
            name="aws",
            provider="aws",
            factory=make_source,
            description="EC2 spot interruptions, rebalance recommendations and scheduled "
            "maintenance, from IMDSv2",
        )
    ]


@hookimpl
def portal_catalogs() -> list[CatalogSpec]:
    return [
        CatalogSpec(
            name="aws",
            provider="aws",
            machine_types=machine_types,
            description="common EC2 spot instance types (vCPUs, memory, GPUs)",
        )
    ]
