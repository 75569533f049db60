"""Job keys: one random key per job, made at job creation, kept away from the checkpoints.

The default :class:`FileKeyStore` keeps each key in its own file under ``PORTAL_HOME/keys``
(folder mode 0700, files 0600), so only the user can read them. A KMS or vault plugin replaces it
through the ``portal_key_store`` hook (:func:`resolve_key_store`); Portal's own answer comes last.

A key store never lives inside the store it protects: :func:`refuse_key_beside_checkpoints`
checks that for local stores, where it is easy to get wrong by pointing both at one folder.
"""

from __future__ import annotations

import os
import secrets
import stat
import threading
from pathlib import Path

from portal.core.specs import KeyStore
from portal.storage.crypto import KEY_SIZE
from portal.storage.errors import JobKeyExistsError, JobKeyMissingError, KeyStoreError
from portal.storage.layout import check_id

__all__ = ["FileKeyStore", "MemoryKeyStore", "refuse_key_beside_checkpoints", "resolve_key_store"]


class FileKeyStore:
    """Keys as files ``HOME/keys/JOB.key`` (32 raw bytes), readable only by the user."""

    def __init__(self, home: str | os.PathLike[str]) -> None:
        self.home = Path(home).expanduser().absolute()
        self.directory = self.home / "keys"

    def _path(self, job_id: str) -> Path:
        return self.directory / f"{check_id(job_id, 'job id')}.key"

    def _ensure_directory(self) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        mode = stat.S_IMODE(self.directory.stat().st_mode)
        if mode & 0o077:
            os.chmod(self.directory, 0o700)

    def create(self, job_id: str) -> bytes:
        """Make and keep a new key for ``job_id``; refuse if it already has one."""
        path = self._path(job_id)
        self._ensure_directory()
        key = secrets.token_bytes(KEY_SIZE)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise JobKeyExistsError(
                f"job {job_id} already has a key ({path}); a job's key is never replaced, since "
                "its checkpoints could no longer be read. Use the existing key",
                details={"job_id": job_id, "path": str(path)},
            ) from None
        try:
            os.fchmod(fd, 0o600)  # the umask may have narrowed it, never widened: be explicit
            os.write(fd, key)
            os.fsync(fd)
        finally:
            os.close(fd)
        return key

    def get(self, job_id: str) -> bytes:
        """The job's key; :class:`JobKeyMissingError` (a ``KeyError``-like answer) if none."""
        path = self._path(job_id)
        try:
            info = path.stat()
        except FileNotFoundError:
            raise JobKeyMissingError(
                f"no key for job {job_id} in {self.directory}: its checkpoints cannot be read "
                "here. Run Portal with the PORTAL_HOME that created the job, or restore the key "
                f"file {path.name} there",
                details={"job_id": job_id, "path": str(path)},
            ) from None
        if stat.S_IMODE(info.st_mode) & 0o077:
            raise KeyStoreError(
                f"key file {path} of job {job_id} can be read by other users (mode "
                f"{stat.S_IMODE(info.st_mode):04o}); Portal refuses to use a key that may have "
                f"leaked. Run chmod 600 {path} if you are sure it did not, or start a new job",
                details={"job_id": job_id, "path": str(path)},
            )
        key = path.read_bytes()
        if len(key) != KEY_SIZE:
            raise KeyStoreError(
                f"key file {path} of job {job_id} holds {len(key)} bytes, not {KEY_SIZE}: it is "
                "damaged. Restore it from a backup",
                details={"job_id": job_id, "path": str(path)},
            )
        return key

    def __repr__(self) -> str:
        return f"FileKeyStore({str(self.home)!r})"


class MemoryKeyStore:
    """Keys in this process only: for tests and for embedding schedulers with their own vault."""

    def __init__(self, keys: dict[str, bytes] | None = None) -> None:
        self._keys = dict(keys or {})
        self._lock = threading.Lock()

    def create(self, job_id: str) -> bytes:
        with self._lock:
            if job_id in self._keys:
                raise JobKeyExistsError(
                    f"job {job_id} already has a key; keys are never replaced",
                    details={"job_id": job_id},
                )
            key = self._keys[job_id] = secrets.token_bytes(KEY_SIZE)
            return key

    def get(self, job_id: str) -> bytes:
        with self._lock:
            try:
                return self._keys[job_id]
            except KeyError:
                raise JobKeyMissingError(
                    f"no key for job {job_id} in this in-memory key store",
                    details={"job_id": job_id},
                ) from None


def resolve_key_store(home: str | os.PathLike[str], plugins: object | None = None) -> KeyStore:
    """The key store a plugin provides (a KMS wins), else the file store under ``home``."""
    if plugins is None:
        from portal.core.plugins import Plugins

        plugins = Plugins.load()
    store = plugins.key_store(str(home))  # type: ignore[attr-defined]
    if store is None:
        return FileKeyStore(home)
    if not isinstance(store, KeyStore):
        raise KeyStoreError(
            f"the portal_key_store plugin returned {type(store).__name__}, which "
            "has no create/get methods: fix or uninstall that plugin"
        )
    return store


def refuse_key_beside_checkpoints(key_store: object, storage_root: Path | None) -> None:
    """Refuse a file key store that sits inside a local checkpoint store's folder."""
    if not isinstance(key_store, FileKeyStore) or storage_root is None:
        return
    keys, root = key_store.directory.resolve(), storage_root.resolve()
    if keys == root or root in keys.parents:
        raise KeyStoreError(
            f"the key store ({keys}) is inside the checkpoint store ({root}): anyone who can read "
            "the checkpoints could read their keys. Keep PORTAL_HOME outside the storage URL's "
            "folder",
            details={"keys": str(keys), "storage": str(root)},
        )
