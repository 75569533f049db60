"""Portal's control plane as an HTTP service: ``portal server`` (API v1, per-user tokens).

The service serves one control-plane store (SQLite or PostgreSQL) to every machine whose
``PORTAL_CONTROL_PLANE`` names it; the client, :class:`portal.control.remote.HttpControlStore`,
and the wire types, :mod:`portal.control.api`, live in ``portal`` so that no machine but the
server's needs this distribution.
"""
