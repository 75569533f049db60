"""Test helpers for Portal and for plugin authors (``pip install portal-testing``, released in
lockstep with portal-spot-core).

Subclass the contract classes in your own test suite (name the subclass ``Test...``), implement
their factory methods, and pytest runs the whole contract against your plugin::

    from portal.testing import NoticeSourceContract

    class TestAcmeNotices(NoticeSourceContract):
        def make_source(self):
            return AcmeNotices(endpoint=self.fake.url)
        def announce(self, source, seconds):
            self.fake.preempt(in_seconds=seconds)

A subclass may not quietly replace a standard test: ``test_no_overrides`` fails unless the
override is marked ``@pytest.mark.xfail(reason=...)``.
"""

from portal.testing.capture import CaptureExtensionContract, SerializerContract
from portal.testing.clock import FakeClock
from portal.testing.contracts import (
    NoticeSourceContract,
    PlacementPolicyContract,
    StorageBackendContract,
)
from portal.testing.keys import KeyStoreContract

__all__ = [
    "CaptureExtensionContract",
    "FakeClock",
    "KeyStoreContract",
    "NoticeSourceContract",
    "PlacementPolicyContract",
    "SerializerContract",
    "StorageBackendContract",
]
