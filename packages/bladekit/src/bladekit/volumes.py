"""``bladekit.Volume``: a thin, picklable handle on portal-storage's :class:`~portal.storage.Volume`.

All storage logic (manifests, blobs, commit, reload) stays in portal-storage. The handle adds two
things a function's container needs:

- it pickles as ``(name, store URL)`` only, so the module-level ``vol = Volume.from_name(...)`` a
  user's ``on_preempt`` refers to travels into the container with the function;
- ``commit()`` / ``reload()`` act on *this process's* mount of the volume, found by name in
  :data:`MOUNTED_VOLUMES`. In the container that is the mount the runner made for
  ``volumes={path: vol}``, whichever copy of the handle the user's code holds (one unpickled with
  the function, or one a re-imported module created anew).

Where the store lives is decided exactly as portal-storage decides it: ``url=`` if given, else
``PORTAL_STORAGE_URL``, else ``PORTAL_HOME/store`` (``PORTAL_HOME`` defaults to ``~/.portal``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from portal.core.settings import Settings
from portal.storage.backend import open_backend
from portal.storage.errors import StorageError
from portal.storage.volumes import Volume as StoreVolume

__all__ = ["MOUNTED_VOLUMES", "Volume"]


class _MountedVolumes:
    """This process's mounts, by (store URL, volume name): the runtime singleton handles use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._mounts: dict[tuple[str, str], StoreVolume] = {}

    def add(self, key: tuple[str, str], volume: StoreVolume) -> None:
        with self._lock:
            current = self._mounts.get(key)
            if current is not None and current.mount_path != volume.mount_path:
                raise StorageError(
                    f"volume {key[1]!r} is already mounted at {current.mount_path} in this "
                    f"process; it cannot also be mounted at {volume.mount_path}. Mount it once "
                    "and use paths below that mount",
                    details={"volume": key[1], "mounted_at": str(current.mount_path)},
                )
            self._mounts[key] = volume

    def get(self, key: tuple[str, str]) -> StoreVolume | None:
        with self._lock:
            return self._mounts.get(key)

    def remove(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._mounts.pop(key, None)


#: The volumes mounted in this process (one container has its own).
MOUNTED_VOLUMES = _MountedVolumes()


class Volume:
    """A named, durable folder mounted into a function's container at a path.

    Get one with :meth:`from_name`; give it to ``@app.function(volumes={"/path": vol})``; inside
    the function read and write plain files under ``/path`` and call :meth:`commit` to make them
    durable (in ``on_preempt``, before the container goes).
    """

    def __init__(self, name: str, url: str, *, _store: StoreVolume | None = None) -> None:
        self.name = name
        self.url = url
        self._store = _store

    @classmethod
    def from_name(
        cls,
        name: str,
        *,
        create_if_missing: bool = False,
        url: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Volume:
        """The volume called ``name``; created when missing only if ``create_if_missing``.

        Raises ``VolumeNotFoundError`` (code ``VOLUME_NOT_FOUND``) for a missing volume, at the
        line that names it rather than later inside a container.
        """
        resolved = (
            url if url is not None else Settings.load(environ=environ, plugins=False).storage_url
        )
        store = StoreVolume.from_name(name, create_if_missing=create_if_missing, url=resolved)
        return cls(store.name, resolved, _store=store)

    @property
    def _key(self) -> tuple[str, str]:
        return (self.url, self.name)

    def _open(self) -> StoreVolume:
        """The storage volume behind this handle (opened lazily after unpickling)."""
        if self._store is None:
            self._store = StoreVolume(self.name, open_backend(self.url))
        return self._store

    # --- mounting ---------------------------------------------------------------------------------

    def mount(self, path: str | os.PathLike[str]) -> Path:
        """Make ``path`` hold the volume's committed files (the runner does this in containers)."""
        store = self._open()
        mounted = store.mount(path)
        MOUNTED_VOLUMES.add(self._key, store)
        return mounted

    def unmount(self, *, remove: bool = False) -> None:
        """Forget this process's mount (``remove`` deletes the local copy; commits stay stored)."""
        store = MOUNTED_VOLUMES.get(self._key)
        if store is not None:
            store.unmount(remove=remove)
            MOUNTED_VOLUMES.remove(self._key)

    @property
    def mount_path(self) -> Path | None:
        """Where this process has the volume mounted, or None."""
        store = MOUNTED_VOLUMES.get(self._key)
        return None if store is None else store.mount_path

    def _mounted(self, action: str) -> StoreVolume:
        store = MOUNTED_VOLUMES.get(self._key)
        if store is None:
            raise StorageError(
                f"cannot {action} volume {self.name!r}: it is not mounted in this process. Give "
                f"it to the function as volumes={{'/path': vol}} (the container mounts it there), "
                "or call vol.mount(path) first",
                details={"volume": self.name, "url": self.url},
            )
        return store

    def commit(self) -> int:
        """Make the mount's current files the volume's new durable version; returns the version."""
        return self._mounted("commit").commit()

    def reload(self) -> int:
        """Make the mount match the latest committed version; returns the version."""
        return self._mounted("reload").reload()

    @property
    def conflicts(self) -> list[str]:
        """The files this mount's last commit found changed by another commit too (its own
        version was kept: the last writer's). Empty when nothing collided."""
        return list(self._mounted("read the conflicts of").conflicts)

    # --- identity and pickling --------------------------------------------------------------------

    def __reduce__(self) -> tuple[Any, ...]:
        # Only the name and the store travel: a backend holds connections and is reopened lazily.
        return (Volume, (self.name, self.url))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Volume) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return f"bladekit.Volume({self.name!r}, url={self.url!r})"
