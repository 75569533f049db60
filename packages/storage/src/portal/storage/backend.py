"""Storage backends over fsspec URLs: whole objects by key, written atomically.

* ``file://`` and plain paths: :class:`LocalBackend`. fsspec's local filesystem writes in place, so
  a crash could leave half an object; here every write goes to a hidden temporary file in the same
  folder and is renamed over the key (atomic on POSIX), optionally after ``fsync``.
* ``memory://``, ``s3://`` (s3fs), ``gs://`` (gcsfs), ``az://`` / ``abfs://`` (adlfs):
  :class:`FsspecBackend`. Object stores replace a whole object per PUT, which is the atomicity the
  store needs. Cloud libraries are optional extras, imported only when a URL needs them.

Listings never use fsspec's directory cache: the checkpoint store lists to decide what exists, and
a stale answer there could hide a manifest or resurrect a deleted chunk.

:func:`open_backend` is the one door every store, volume and view opens storage through: the
schemes above are portal-storage's own; any other scheme goes to the installed plugin that
registers it (``portal_storage_backends``), so a pip-installed ``acme://`` backend works wherever
a storage URL is accepted.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from portal.core.errors import PluginError
from portal.core.plugins import Plugins, call_factory
from portal.core.specs import StorageBackend, StorageBackendSpec
from portal.storage.errors import InvalidStorageUrlError, MissingExtraError, StorageError

__all__ = [
    "SCHEMES",
    "FsspecBackend",
    "LocalBackend",
    "open_backend",
    "open_builtin_backend",
    "scheme_of",
]

#: scheme -> (module that implements it, extra that installs it)
_CLOUD: dict[str, tuple[str, str]] = {
    "s3": ("s3fs", "s3"),
    "s3a": ("s3fs", "s3"),
    "gs": ("gcsfs", "gcs"),
    "gcs": ("gcsfs", "gcs"),
    "az": ("adlfs", "azure"),
    "abfs": ("adlfs", "azure"),
    "abfss": ("adlfs", "azure"),
}
SCHEMES: tuple[str, ...] = ("file", "memory", *_CLOUD)
_TMP_MARK = ".portal-tmp-"
_FADVISE = getattr(os, "posix_fadvise", None)  # Linux and most Unixes; not macOS


def scheme_of(url: str) -> str:
    """``s3`` for ``s3://b/p``; a plain path is ``file``."""
    return url.split("://", 1)[0].lower() if "://" in url else "file"


def _check_key(key: str) -> str:
    parts = key.split("/")
    if (
        not key
        or key.startswith("/")
        or any(p in ("", ".", "..") for p in parts[:-1])
        or parts[-1] in (".", "..")
    ):
        raise InvalidStorageUrlError(
            f"storage key {key!r} is not a relative '/'-separated path without '.' or '..' parts",
            details={"key": key},
        )
    return key


class LocalBackend:
    """A folder on a local (or mounted) filesystem."""

    def __init__(self, url: str, *, fsync: bool = True) -> None:
        path = url[len("file://") :] if url.lower().startswith("file://") else url
        self.root = Path(path).expanduser().absolute()
        self.url = self.root.as_uri()
        self.fsync = fsync
        self._lock = threading.Lock()
        self._unsynced: set[Path] = set()

    def _path(self, key: str) -> Path:
        return self.root / _check_key(key)

    def write_bytes(self, key: str, data: bytes | bytearray | memoryview) -> None:
        self._write(key, data, sync=self.fsync)

    def write_bytes_deferred(self, key: str, data: bytes | bytearray | memoryview) -> None:
        """Write without waiting for the disk; :meth:`sync` makes it durable later.

        The checkpoint writer stores its packs this way and syncs once before the manifest: no
        transfer thread ever waits for the disk, with the same guarantee (nothing points at a
        chunk before the chunk is durable). Each write also asks the kernel to start writing the
        file back now (``POSIX_FADV_DONTNEED``), so the disk works while the CPU seals the next
        packs, instead of all at the final sync.
        """
        path = self._write(key, data, sync=False, kick=self.fsync)
        if self.fsync:
            with self._lock:
                self._unsynced.add(path)

    def sync(self) -> None:
        """Make every deferred write durable (data, then the folders naming it)."""
        with self._lock:
            paths, self._unsynced = self._unsynced, set()
        folders: set[Path] = set()
        for path in sorted(paths):
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            folders.add(path.parent)
        for folder in sorted(folders):
            fd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def _write(
        self,
        key: str,
        data: bytes | bytearray | memoryview,
        *,
        sync: bool,
        kick: bool = False,
        exclusive: bool = False,
    ) -> Path:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}{_TMP_MARK}{uuid.uuid4().hex}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if sync:
                os.fsync(fd)
            elif kick and _FADVISE is not None:
                _FADVISE(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.close(fd)
        try:
            if exclusive:
                os.link(tmp, path)  # FileExistsError where an object is: nothing replaced
            else:
                os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)  # gone already after a replace
        return path

    def write_new(self, key: str, data: bytes) -> None:
        """Write ``key`` only if no object has that key (:class:`FileExistsError` otherwise),
        whole and at once: written aside, then linked into place (a link never replaces)."""
        self._write(key, data, sync=self.fsync, exclusive=True)

    def read_bytes(self, key: str) -> bytes:
        path = self._path(key)
        if path.is_dir():
            raise FileNotFoundError(f"no object {key!r} in {self.url}")
        return path.read_bytes()

    def read_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of an object (fewer if it is shorter: the caller checks)."""
        path = self._path(key)
        if path.is_dir():
            raise FileNotFoundError(f"no object {key!r} in {self.url}")
        with open(path, "rb") as f:
            f.seek(start)
            return f.read(max(0, end - start))

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str) -> list[str]:
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = self.root / base if base else self.root
        if not start.is_dir():
            return []
        found: list[str] = []
        for folder, _dirs, files in os.walk(start):
            rel = Path(folder).relative_to(self.root).as_posix()
            for name in files:
                if _TMP_MARK in name:
                    continue
                key = name if rel == "." else f"{rel}/{name}"
                if key.startswith(prefix):
                    found.append(key)
        return sorted(found)

    def delete(self, key: str) -> None:
        path = self._path(key)
        with self._lock:
            self._unsynced.discard(path)  # a deleted write has nothing left to make durable
        path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"LocalBackend({self.url!r})"


def _precondition_failed(exc: BaseException) -> bool:
    """Whether an object store refused a conditional write because the object exists (HTTP
    412), as some fsspec versions raise it rather than :class:`FileExistsError`."""
    text = f"{exc} {getattr(exc, 'args', '')}"
    return "412" in text or "PreconditionFailed" in text or "ConditionNotMet" in text


class FsspecBackend:
    """Any fsspec filesystem whose single-object writes are atomic (object stores, memory)."""

    def __init__(self, url: str, options: Mapping[str, Any] | None = None) -> None:
        scheme = scheme_of(url)
        opts = dict(options or {})
        if scheme in _CLOUD:
            module, extra = _CLOUD[scheme]
            if importlib.util.find_spec(module) is None:
                raise MissingExtraError(
                    f"storage URL {url} needs {module}, which is not installed: "
                    f"pip install 'portal-storage[{extra}]'",
                    details={"url": url, "module": module, "extra": extra},
                )
            opts.setdefault("use_listings_cache", False)
            if module == "s3fs":
                config = dict(opts.get("config_kwargs") or {})
                config.setdefault("max_pool_connections", 64)
                opts["config_kwargs"] = config
        import fsspec.core

        fs, root = fsspec.core.url_to_fs(url, **opts)
        self.fs = fs
        self.root = root.rstrip("/")
        self.url = url.rstrip("/")

    def _path(self, key: str) -> str:
        return f"{self.root}/{_check_key(key)}"

    def write_bytes(self, key: str, data: bytes) -> None:
        # Some clients (azure-storage-blob) accept only real bytes, not any buffer.
        self.fs.pipe_file(self._path(key), data if isinstance(data, bytes) else bytes(data))

    def write_new(self, key: str, data: bytes) -> None:
        """Write ``key`` only if no object has that key (:class:`FileExistsError` otherwise):
        fsspec's exclusive mode, a conditional write on the object stores (S3's
        ``If-None-Match: *``, GCS's ``ifGenerationMatch=0``, Azure's ``If-None-Match``)."""
        path = self._path(key)
        try:
            with self.fs.open(path, "xb") as out:
                out.write(data)
        except FileExistsError:
            raise
        except (ValueError, NotImplementedError, TypeError) as exc:
            raise StorageError(
                f"the store {self.url} cannot write an object only if it is absent "
                f"({type(exc).__name__}: {exc}), which a volume's commit needs so that no commit "
                "replaces another's: upgrade its fsspec library (s3fs, gcsfs and adlfs support "
                "it), or keep volumes in a store that does",
                details={"url": self.url},
            ) from exc
        except OSError as exc:
            if _precondition_failed(exc):
                raise FileExistsError(f"{key} exists in {self.url}") from exc
            raise

    def read_bytes(self, key: str) -> bytes:
        data: bytes = self.fs.cat_file(self._path(key))
        return data

    def read_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of an object, in one ranged request (fewer if it is shorter)."""
        data: bytes = self.fs.cat_file(self._path(key), start=start, end=end)
        return data

    def exists(self, key: str) -> bool:
        return bool(self.fs.isfile(self._path(key)))

    def list(self, prefix: str) -> list[str]:
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = f"{self.root}/{base}" if base else self.root
        try:
            paths = self.fs.find(start)
        except FileNotFoundError:
            return []
        strip = len(self.root) + 1
        keys = (p[strip:] for p in paths if p.startswith(self.root + "/"))
        return sorted(k for k in keys if k.startswith(prefix))

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._path(key))

    def __repr__(self) -> str:
        return f"FsspecBackend({self.url!r})"


def open_backend(
    url: str, options: Mapping[str, Any] | None = None, *, plugins: Plugins | None = None
) -> StorageBackend:
    """The backend for ``url``: portal-storage's own for its schemes (:data:`SCHEMES`), else the
    one an installed plugin registers for the scheme. ``options`` go to the backend (for
    portal-storage's: ``endpoint_url``, ``token``, ``connection_string``... to the filesystem;
    for local paths the only option is ``fsync``, default true). ``plugins`` defaults to this
    process's installed plugins, loaded once and only when a URL needs them."""
    scheme = scheme_of(url)
    if scheme in SCHEMES:
        return open_builtin_backend(url, options)
    spec = _registered_backend(scheme, url, plugins if plugins is not None else _plugins())
    backend = call_factory(
        spec.factory, url, dict(options or {}), what=f"storage backend {spec.name!r} for {url}"
    )
    if not isinstance(backend, StorageBackend):
        raise PluginError(
            f"storage backend {spec.name!r} (for {scheme}://) returned "
            f"{type(backend).__name__}, which is not a storage backend (write_bytes, read_bytes, "
            "exists, list, delete and url); fix or uninstall the plugin that registers it"
        )
    return backend


@functools.cache
def _plugins() -> Plugins:
    return Plugins.load()


def _registered_backend(scheme: str, url: str, plugins: Plugins) -> StorageBackendSpec:
    registered = [
        spec
        for spec in plugins.storage_backends().values()
        if scheme in (s.lower() for s in spec.schemes)
    ]
    if registered:
        return registered[0]
    others = sorted(
        {s for spec in plugins.storage_backends().values() for s in spec.schemes} - set(SCHEMES)
    )
    installed = ", ".join(s + "://" for s in (*SCHEMES, *others))
    raise InvalidStorageUrlError(
        f"storage URL {url} has scheme {scheme}://, which portal-storage does not handle and no "
        f"installed plugin registers; use one of {installed} or a local path, or install the "
        f"plugin that provides {scheme}:// (it registers portal_storage_backends)",
        details={"url": url, "scheme": scheme, "schemes": [*SCHEMES, *others]},
    )


def open_builtin_backend(
    url: str, options: Mapping[str, Any] | None = None
) -> LocalBackend | FsspecBackend:
    """portal-storage's own backend for ``url`` (one of :data:`SCHEMES`)."""
    scheme = scheme_of(url)
    if scheme == "file":
        opts = dict(options or {})
        unknown = sorted(set(opts) - {"fsync"})
        if unknown:
            raise InvalidStorageUrlError(
                f"option {unknown[0]!r} does not apply to local storage {url}; the only local "
                "option is fsync",
                details={"url": url, "option": unknown[0]},
            )
        return LocalBackend(url, fsync=bool(opts.get("fsync", True)))
    if scheme not in SCHEMES:
        raise InvalidStorageUrlError(
            f"storage URL {url} has scheme {scheme}://, which portal-storage does not handle; "
            f"use one of {', '.join(s + '://' for s in SCHEMES)} or a local path",
            details={"url": url, "scheme": scheme},
        )
    return FsspecBackend(url, options)
