"""Acme object storage: ``acme://BUCKET/PREFIX``. The (imaginary) Acme cloud mounts every bucket
as a folder under ``ACME_STORAGE_ROOT`` (default ``/mnt/acme``); an object is a file, replaced
whole by a rename, which is the atomic write Portal's stores need."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from portal.core.hookspecs import hookimpl
from portal.core.specs import StorageBackendSpec


class AcmeStorage:
    def __init__(self, url: str, options: dict[str, object]) -> None:
        self.url = url
        root = str(options.get("root") or os.environ.get("ACME_STORAGE_ROOT", "/mnt/acme"))
        self.base = Path(root) / url.split("://", 1)[1].strip("/")

    def _path(self, key: str) -> Path:
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"acme: key {key!r} is not a relative path inside the bucket")
        return self.base / key

    def write_bytes(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)

    def write_new(self, key: str, data: bytes) -> None:
        """Write only where no object is (FileExistsError otherwise): the conditional write a
        volume's commit needs, so that no commit replaces another's. Written aside, then linked
        into place (a link never replaces a file)."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        tmp.write_bytes(data)
        try:
            os.link(tmp, path)
        finally:
            tmp.unlink()

    def read_bytes(self, key: str) -> bytes:
        return self._path(key).read_bytes()  # FileNotFoundError for a missing key

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str) -> list[str]:
        if not self.base.is_dir():
            return []
        keys = (p.relative_to(self.base).as_posix() for p in self.base.rglob("*") if p.is_file())
        return sorted(k for k in keys if k.startswith(prefix) and not k.endswith(".tmp"))

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)


@hookimpl
def portal_storage_backends() -> list[StorageBackendSpec]:
    return [StorageBackendSpec(name="acme", schemes=("acme",), factory=AcmeStorage)]
