"""Portal's Azure provider: Spot eviction notices from Scheduled Events and a catalog of VM sizes.

Importing this package is light; the notice source is :class:`portal.providers.azure.notices.
AzureNoticeSource`, the test fake :class:`portal.providers.azure.testing.FakeAzureMetadata`.
"""

__all__: list[str] = []
