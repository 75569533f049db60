"""Portal's GCP provider: Spot notices from the GCE metadata server and a catalog of machine types.

Importing this package is light; the notice source is :class:`portal.providers.gcp.notices.
GcpNoticeSource`, the test fake :class:`portal.providers.gcp.testing.FakeGCEMetadata`.
"""

__all__: list[str] = []
