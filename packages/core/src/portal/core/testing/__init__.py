"""Test helpers for Portal and for plugin authors.

Subclass the contract classes in your own test suite (name the subclass ``Test...``), implement
their factory methods, and pytest runs the whole contract against your plugin::

    from portal.core.testing import NoticeSourceContract

    class TestAcmeNotices(NoticeSourceContract):
        def make_source(self):
            return AcmeNotices(endpoint=self.fake.url)
        def announce(self, source, seconds):
            self.fake.preempt(in_seconds=seconds)

Requires pytest (``pip install portal-core[testing]``).
"""

from portal.core.testing.clock import FakeClock
from portal.core.testing.contracts import (
    NoticeSourceContract,
    PlacementPolicyContract,
    StorageBackendContract,
)

__all__ = [
    "FakeClock",
    "NoticeSourceContract",
    "PlacementPolicyContract",
    "StorageBackendContract",
]
