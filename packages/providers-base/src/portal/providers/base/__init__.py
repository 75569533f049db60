"""What Portal's cloud providers share, for ours and third parties' alike.

- :mod:`~portal.providers.base.metadata`: the metadata HTTP client (no proxy, whole-request
  deadlines, capped bodies, one error naming the endpoint);
- :mod:`~portal.providers.base.dmi`: the DMI strings detection reads, never the network;
- :mod:`~portal.providers.base.source`: the template every metadata notice source shares;
  :mod:`~portal.providers.base.polling` (due-time polling) and
  :mod:`~portal.providers.base.watching` (hanging GETs) add how it waits;
- :mod:`~portal.providers.base.registration`: ``provider_specs``, lazy registration;
- :mod:`~portal.providers.base.testing`: the loopback HTTP fake provider fakes are built on.

Importing this package is light (standard library and portal-spot-core only).
"""

__all__: list[str] = []
