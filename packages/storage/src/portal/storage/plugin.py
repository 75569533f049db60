"""portal-storage's plugin: the fsspec storage backend and the default (file) key store.

Registered under the ``portal`` entry-point group like any third-party plugin. The key store hook
is ``trylast``: a KMS or vault plugin that answers wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from portal.core.hookspecs import hookimpl
from portal.core.specs import KeyStore, StorageBackend, StorageBackendSpec

__all__ = ["portal_key_store", "portal_storage_backends"]


def _make_backend(url: str, options: Mapping[str, Any]) -> StorageBackend:
    from portal.storage.backend import open_builtin_backend

    return open_builtin_backend(url, options)


@hookimpl
def portal_storage_backends() -> list[StorageBackendSpec]:
    from portal.storage.backend import SCHEMES

    return [
        StorageBackendSpec(
            name="fsspec",
            schemes=SCHEMES,
            factory=_make_backend,
            description="local folders, memory, S3 (s3fs), GCS (gcsfs), Azure Blob (adlfs) via fsspec",
        )
    ]


@hookimpl(trylast=True)
def portal_key_store(home: str) -> KeyStore | None:
    from portal.storage.keys import FileKeyStore

    return FileKeyStore(home)
