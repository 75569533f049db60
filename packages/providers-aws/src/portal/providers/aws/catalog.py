"""The built-in catalog of common aws spot machine types (vCPUs, memory, GPUs), and pool identity.

The data file is ``catalog.json``, refreshed from EC2 DescribeInstanceTypes as README.md describes; the
loading is portal-providers-base's :class:`portal.providers.base.catalog.Catalog`.
"""

from __future__ import annotations

from portal.providers.base.catalog import Catalog

__all__ = ["CATALOG", "PROVIDER", "SPOT_NOTICE_S", "find", "load_machine_types", "pool_identity"]

CATALOG = Catalog(provider="aws", package=__package__ or __name__, spot_notice_s=120.0)
PROVIDER = CATALOG.provider
#: How long this provider's spot preemption notice is, in seconds (the state-size bound's notice).
SPOT_NOTICE_S = CATALOG.spot_notice_s
load_machine_types = CATALOG.machine_types
find = CATALOG.find
pool_identity = CATALOG.pool_identity
