"""One storage URL's objects, each call retried: what the writer, the reader and garbage
collection are given, instead of the store itself.

The store decides *what* to read and write (keys, manifests, the job's key); these calls only
move bytes, each through the store's back-off (:class:`~portal.storage.retry.RetryPolicy`). The
narrow interface keeps the modules acyclic: ``store`` uses ``writer``, ``reader`` and ``gc``; none
of them knows the store.
"""

from __future__ import annotations

from portal.core.specs import StorageBackend
from portal.storage.retry import RetryPolicy

__all__ = ["StoredObjects"]


class StoredObjects:
    """The objects under one backend, every call retried on transient errors."""

    def __init__(self, backend: StorageBackend, retry: RetryPolicy, url: str) -> None:
        self.backend = backend
        self.retry = retry
        self.url = url

    def put_pack(self, key: str, data: bytes | bytearray | memoryview) -> None:
        """Store a pack of sealed chunks; where the backend can defer durability, :meth:`sync`
        ends it.

        ``data`` may be a view of a buffer the writer reuses once this returns: the local backend
        writes it as it is (no copy); any other backend gets its own ``bytes`` (object-store
        clients may keep what they are given, and some accept only ``bytes``).
        """
        deferred = getattr(self.backend, "write_bytes_deferred", None)
        if deferred is not None:
            self.retry.call(lambda: deferred(key, data), what=f"write {key}", url=self.url)
            return
        whole = bytes(data)
        self.retry.call(
            lambda: self.backend.write_bytes(key, whole), what=f"write {key}", url=self.url
        )

    def sync(self) -> None:
        """Make every deferred write durable (a backend without deferred writes has none)."""
        sync = getattr(self.backend, "sync", None)
        if sync is not None:
            sync()

    def put(self, key: str, data: bytes | bytearray) -> None:
        self.retry.call(
            lambda: self.backend.write_bytes(key, data),  # type: ignore[arg-type]
            what=f"write {key}",
            url=self.url,
        )

    def get(self, key: str) -> bytes:
        return self.retry.call(
            lambda: self.backend.read_bytes(key), what=f"read {key}", url=self.url
        )

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of an object: one ranged read where the backend has them."""
        read_range = getattr(self.backend, "read_range", None)
        if read_range is None:  # a plugin backend with whole-object reads only
            return self.get(key)[start:end]
        data: bytes = self.retry.call(
            lambda: read_range(key, start, end), what=f"read {key}", url=self.url
        )
        return data

    def list(self, prefix: str) -> list[str]:
        return self.retry.call(
            lambda: self.backend.list(prefix), what=f"list {prefix}", url=self.url
        )

    def delete(self, key: str) -> None:
        self.retry.call(lambda: self.backend.delete(key), what=f"delete {key}", url=self.url)

    def exists(self, key: str) -> bool:
        """Whether ``key`` exists; an error asking counts as yes (the caller reports what it
        found missing, so a doubt must not read as absence). Not retried: a diagnosis only."""
        try:
            return bool(self.backend.exists(key))
        except OSError:
            return True
