"""Volumes: named folders of files that outlive machines (bladekit's ``Volume``).

A function mounts a volume at a local path, reads and writes plain files there, and calls
:meth:`Volume.commit` to make its writes durable (before a preemption, in ``on_preempt``). Another
machine mounts the same name and sees the last committed version; :meth:`Volume.reload` fetches a
newer one.

Stored in the same store as checkpoints, through the same backends and retries::

    ROOT/volumes/NAME/volume              marker (created_at)
    ROOT/volumes/NAME/versions/0000000007 each committed version: path -> size, sha256
    ROOT/volumes/NAME/manifest            the latest version again (for a reader of an older
                                          Portal; a volume it made has only this)
    ROOT/volumes/NAME/blobs/SHA           file contents, by content (unchanged files not re-sent)

A commit is atomic and compare-and-set: version N+1 is written only if no commit wrote it first
(an exclusive create: a conditional write on the object stores), after every blob is stored, so
a reader sees the old version or the new one, and no commit replaces another's. A commit that
finds a newer version than the one its mount started from (another mount committed meanwhile)
**merges**: the files this mount added, changed or deleted since are applied to the newer
version, and every other file is kept as the other commit left it; the mount then receives the
other's files. A file both changed: this commit's (the last writer's) is kept, and the commit
says so (``Volume.conflicts``, and a warning naming the files). A file this mount deleted that
the other changed is kept (a deletion never discards another's new content). Version keys are
never deleted: a commit that read an old version must find its successor taken.
Volumes hold the user's files as they are (not encrypted by Portal, like a bucket: use the
bucket's encryption); their contents are checked against SHA-256 on download.

The manifest is authenticated: it is stored with an HMAC-SHA256 under the volume's own key, kept
in the key store beside the job keys (``PORTAL_HOME/keys/volume-NAME.key``, or a KMS plugin's),
never in the bucket. Someone who can write the bucket but holds no key cannot change what a mount
holds: a manifest whose code does not verify (or that has none) is refused, named, before anything
is fetched. Another machine mounts the volume once it holds the key (copy it as you copy job
keys, or use a shared key store). A bucket writer can still put back an older manifest of the
same volume (its code is valid): the version it mounts is then said in ``reload``'s answer.

A manifest is also read as untrusted input: before anything is written, every path must be
relative, without ``.``/``..`` parts, and reach the mount through no symbolic link, and modes keep
their permission bits only (never setuid, setgid or sticky). One bad entry refuses the whole
reload, named, with nothing written.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import random
import shutil
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgspec

from portal.core.clock import SYSTEM_CLOCK, Clock
from portal.core.specs import KeyStore, StorageBackend
from portal.storage.backend import open_backend
from portal.storage.errors import (
    JobKeyExistsError,
    JobKeyMissingError,
    StorageError,
    VolumeCorruptError,
    VolumeKeyMissingError,
    VolumeNotFoundError,
)
from portal.storage.layout import check_id
from portal.storage.retry import RetryPolicy

log = logging.getLogger("portal.storage.volumes")

__all__ = ["TEMP_MARK", "Volume", "VolumeFile", "VolumeManifest", "key_id"]

#: A file whose name contains this is a write in progress: a commit leaves it out. Writers that
#: save into a mounted volume (bladekit's save_checkpoint) name their temp files with it.
TEMP_MARK = ".portal-volume-tmp-"
_TMP = TEMP_MARK
#: A restored file's mode keeps these bits only: never setuid, setgid or sticky from a manifest.
_PERMISSIONS = 0o777
#: How many times a commit that lost the race for the next version merges and tries again.
_COMMIT_TRIES = 60
#: The longest a commit that lost the race waits before it tries again (a random wait, doubling
#: from 0.1 s: four mounts committing at once on a slow store took 20 tries without one).
_COMMIT_BACKOFF_MAX_S = 2.0


class VolumeFile(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    size: int
    sha256: str
    mode: int = 0o644


class VolumeManifest(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    format: int = 1
    name: str
    version: int = 0
    committed_at: float = 0.0
    files: dict[str, VolumeFile] = {}


class _Signed(msgspec.Struct, frozen=True, kw_only=True):
    """What the ``manifest`` object holds: the manifest's exact bytes and their code."""

    format: int = 2
    manifest: msgspec.Raw
    mac: str


def _mac(key: bytes, name: str, body: bytes) -> str:
    """The manifest's code, bound to the volume's name (one volume's manifest is no other's)."""
    message = b"portal volume manifest\0" + name.encode() + b"\0" + body
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def key_id(name: str) -> str:
    """The volume's key's name in the key store (beside the job keys, ``j-...``)."""
    return f"volume-{name}"


class _Marker(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    created_at: float


def _hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


class Volume:
    """A named, durable folder. Get one with :meth:`from_name`."""

    def __init__(
        self,
        name: str,
        backend: StorageBackend,
        *,
        clock: Clock = SYSTEM_CLOCK,
        retry: RetryPolicy | None = None,
        parallelism: int = 8,
        keys: KeyStore | None = None,
    ) -> None:
        self.name = check_id(name, "volume name")
        self.backend = backend
        self._keys = keys  # resolved from PORTAL_HOME and the plugins on first use when None
        self.url = backend.url.rstrip("/")
        self.clock = clock
        self.retry = retry or RetryPolicy(clock=clock)
        self.parallelism = parallelism
        self.mount_path: Path | None = None
        self.version: int | None = None  # committed version the mount matches
        #: The files of that version: what this mount's changes are counted from at a commit.
        self._base: dict[str, VolumeFile] = {}
        #: The files the last commit found changed by another commit too (its own were kept).
        self.conflicts: list[str] = []
        # (size, mtime_ns) -> sha256 of files as last synced, to skip hashing unchanged files
        self._seen: dict[str, tuple[int, int, str]] = {}

    # --- finding ------------------------------------------------------------------------------

    @classmethod
    def from_name(
        cls,
        name: str,
        *,
        create_if_missing: bool = False,
        url: str | None = None,
        options: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        keys: KeyStore | None = None,
    ) -> Volume:
        """The volume called ``name`` in the store at ``url`` (default: Portal's storage setting,
        ``PORTAL_STORAGE_URL`` or ``PORTAL_HOME/store``). Created when missing only if asked.
        ``keys``: where its key is (default: the key store of ``PORTAL_HOME``)."""
        if url is None or keys is None:
            from portal.core.settings import Settings

            settings = Settings.load(environ=environ, plugins=False)
            url = url if url is not None else settings.storage_url
            if keys is None:
                from portal.storage.keys import resolve_key_store

                keys = resolve_key_store(settings.home)
        volume = cls(name, open_backend(url, options), clock=clock, keys=keys)
        marker = volume._key("volume")
        if not volume._call(lambda: volume.backend.exists(marker), f"check {marker}"):
            if not create_if_missing:
                raise VolumeNotFoundError(
                    f"volume {name!r} does not exist in {volume.url}. Create it with "
                    f"Volume.from_name({name!r}, create_if_missing=True), or check the name and "
                    "the storage URL (PORTAL_STORAGE_URL)",
                    details={"volume": name, "url": volume.url},
                )
            body = msgspec.json.encode(_Marker(name=name, created_at=clock.now()))
            volume._call(lambda: volume.backend.write_bytes(marker, body), f"write {marker}")
        return volume

    def _key(self, rest: str) -> str:
        return f"volumes/{self.name}/{rest}"

    def _call(self, fn: Any, what: str) -> Any:
        return self.retry.call(fn, what=what, url=self.url)

    def _key_store(self) -> KeyStore:
        if self._keys is None:
            from portal.core.settings import Settings
            from portal.storage.keys import resolve_key_store

            self._keys = resolve_key_store(Settings.load(plugins=False).home)
        return self._keys

    def _mac_key(self, *, create: bool) -> bytes:
        """The volume's key; made when ``create`` (a volume's first commit) and none exists."""
        keys, kid = self._key_store(), key_id(self.name)
        try:
            return keys.get(kid)
        except (KeyError, JobKeyMissingError):
            if not create:
                raise VolumeKeyMissingError(
                    f"this machine holds no key for volume {self.name!r} ({kid} in its key "
                    f"store), so its manifest in {self.url} cannot be verified and is not used. "
                    "Copy the key from the machine that made the volume (PORTAL_HOME/keys/"
                    f"{kid}.key, as job keys are copied), or use a key store plugin both share",
                    details={"volume": self.name, "key": kid},
                ) from None
        try:
            return keys.create(kid)
        except JobKeyExistsError:  # made meanwhile by another process of this user
            return keys.get(kid)

    def _manifest_bytes(self) -> bytes | None:
        """The stored manifest as it is (None: nothing committed yet)."""
        key = self._key("manifest")
        try:
            data: bytes = self._call(lambda: self.backend.read_bytes(key), f"read {key}")
        except FileNotFoundError:
            return None
        return data

    def _latest_bytes(self) -> bytes | None:
        """The latest committed version as stored: the highest of ``versions/``, or (a volume
        an older Portal committed) its ``manifest``; None when nothing was committed."""
        prefix = self._key("versions/")
        keys = self._call(lambda: self.backend.list(prefix), f"list {prefix}")
        if not keys:
            return self._manifest_bytes()
        latest = max(keys)
        data: bytes = self._call(lambda: self.backend.read_bytes(latest), f"read {latest}")
        return data

    def _remote(self) -> VolumeManifest:
        return self._verified(self._latest_bytes())

    def _verified(self, data: bytes | None) -> VolumeManifest:
        """The committed manifest ``data``, verified with the volume's key; an empty one when
        none was committed."""
        if data is None:
            return VolumeManifest(name=self.name)
        try:
            signed = msgspec.json.decode(data, type=_Signed)
        except msgspec.DecodeError:
            raise self._unverified(
                "it carries no code (written by an older Portal, or by someone without the key)"
            ) from None
        expected = _mac(self._mac_key(create=False), self.name, bytes(signed.manifest))
        if not hmac.compare_digest(expected, signed.mac):
            raise self._unverified("its code does not verify with this volume's key")
        try:
            return msgspec.json.decode(bytes(signed.manifest), type=VolumeManifest)
        except msgspec.DecodeError as exc:
            raise self._unverified(f"it cannot be read ({exc})") from None

    def _unverified(self, why: str) -> VolumeCorruptError:
        return VolumeCorruptError(
            f"the manifest of volume {self.name!r} in {self.url} is not used: {why}. Nothing was "
            "fetched or written. If you wrote it with a Portal that did not sign manifests, or "
            "it is damaged, commit the volume again from a machine that holds its files and key",
            details={"volume": self.name},
        )

    # --- mounting -----------------------------------------------------------------------------

    def mount(self, path: str | os.PathLike[str]) -> Path:
        """Make ``path`` hold the volume's committed files; later commits and reloads use it."""
        target = Path(path).absolute()
        target.mkdir(parents=True, exist_ok=True)
        self.mount_path = target
        self._seen.clear()
        self.reload()
        return target

    def _mounted(self) -> Path:
        if self.mount_path is None:
            raise StorageError(
                f"volume {self.name!r} is not mounted: call volume.mount(path) first (a function "
                "with volumes={{path: volume}} is mounted for you)",
                details={"volume": self.name},
            )
        return self.mount_path

    def _local_files(self) -> dict[str, Path]:
        root = self._mounted()
        files: dict[str, Path] = {}
        for folder, _dirs, names in os.walk(root):
            for name in names:
                full = Path(folder) / name
                if _TMP in name or full.is_symlink() or not full.is_file():
                    continue
                files[full.relative_to(root).as_posix()] = full
        return files

    def _local_sha(self, rel: str, path: Path) -> str:
        info = path.stat()
        seen = self._seen.get(rel)
        if seen and seen[0] == info.st_size and seen[1] == info.st_mtime_ns:
            return seen[2]
        sha = _hash_file(path)
        self._seen[rel] = (info.st_size, info.st_mtime_ns, sha)
        return sha

    # --- commit / reload --------------------------------------------------------------------------

    def commit(self) -> int:
        """Upload changed files and publish them as the volume's new version; returns it.

        Compare-and-set (see the module): a commit that finds another's version newer than its
        mount's merges this mount's changes into it, and the mount receives the other's files."""
        local = self._local_files()
        files = {
            rel: VolumeFile(
                size=path.stat().st_size,
                sha256=self._local_sha(rel, path),
                mode=path.stat().st_mode & 0o777,
            )
            for rel, path in sorted(local.items())
        }
        sent: set[str] = set()  # blobs stored by an earlier try of this commit
        for attempt in range(_COMMIT_TRIES):
            if attempt:  # lost the race: let the winners through, at a random moment
                self.clock.sleep(random.uniform(0.0, min(_COMMIT_BACKOFF_MAX_S, 0.05 * 2**attempt)))
            committed = self._latest_bytes()  # read once: is this the first commit, and what
            mac_key = self._mac_key(create=committed is None)  # a first commit makes the key
            try:
                remote = self._verified(committed)
            except VolumeCorruptError:
                # A manifest that does not verify is replaced whole: nothing it lists is
                # trusted (every file is sent again), which is the way out its error gives.
                remote = VolumeManifest(name=self.name, version=self.version or 0)
                self._base = {}
            merged, conflicts = self._merge(remote, files)
            sent |= self._upload(local, files, sent | {f.sha256 for f in remote.files.values()})
            version = remote.version + 1
            if self._publish(version, merged, mac_key):
                break
        else:
            raise StorageError(
                f"volume {self.name!r} could not be committed: {_COMMIT_TRIES} other commits "
                "won the race for the next version meanwhile. Commit again",
                details={"volume": self.name},
            )
        self.conflicts = conflicts
        if conflicts:
            log.warning(
                "volume %r, version %d: %s changed by another commit too; this commit's kept "
                "(the last writer's)",
                self.name,
                version,
                ", ".join(conflicts),
            )
        theirs = {rel: e for rel, e in merged.items() if files.get(rel) != e}
        self._fetch(self._mounted(), theirs, version)  # the other commits' files, here too
        self.version, self._base = version, merged
        return version

    def _merge(
        self, remote: VolumeManifest, files: dict[str, VolumeFile]
    ) -> tuple[dict[str, VolumeFile], list[str]]:
        """The files of the next version: ``remote``'s, with what this mount changed since its
        base (added, changed, deleted) applied; and the files both changed (this one's kept)."""
        if remote.version == (self.version or 0):
            return dict(files), []  # nobody committed meanwhile: the mount is the version
        base = self._base
        merged = dict(remote.files)
        conflicts: list[str] = []
        for rel, entry in files.items():
            if base.get(rel) == entry:
                continue  # untouched here: the newer version's stands
            theirs = remote.files.get(rel)
            if theirs is not None and theirs != base.get(rel) and theirs != entry:
                conflicts.append(rel)
            merged[rel] = entry
        for rel, entry in base.items():
            if rel not in files and remote.files.get(rel) == entry:
                merged.pop(rel, None)  # deleted here, unchanged there
        return merged, sorted(conflicts)

    def _upload(
        self, local: dict[str, Path], files: dict[str, VolumeFile], stored: set[str]
    ) -> set[str]:
        """Store the blobs of this mount's files that the store lacks; their hashes."""
        uploads: dict[str, Path] = {}
        for rel, entry in files.items():
            if entry.sha256 not in stored:
                uploads.setdefault(entry.sha256, local[rel])

        def upload(item: tuple[str, Path]) -> None:
            sha, path = item
            key = self._key(f"blobs/{sha}")
            data = path.read_bytes()
            if hashlib.sha256(data).hexdigest() != sha:  # changed while committing: take it anew
                raise StorageError(
                    f"file {path} of volume {self.name!r} changed during commit; "
                    "commit again once it is written",
                    details={"volume": self.name, "path": str(path)},
                )
            self._call(lambda: self.backend.write_bytes(key, data), f"write {key}")

        with ThreadPoolExecutor(self.parallelism) as pool:
            list(pool.map(upload, uploads.items()))
        return set(uploads)

    def _publish(self, version: int, files: dict[str, VolumeFile], mac_key: bytes) -> bool:
        """Write ``version`` if no commit wrote it first (False: one did); then the plain
        ``manifest`` for older readers (a later version's writer may overwrite it first: a
        reader of this Portal takes the highest version, never it)."""
        manifest = VolumeManifest(
            name=self.name, version=version, committed_at=self.clock.now(), files=files
        )
        body = msgspec.json.encode(manifest)
        signed = msgspec.json.encode(
            _Signed(manifest=msgspec.Raw(body), mac=_mac(mac_key, self.name, body))
        )
        key = self._key(f"versions/{version:010d}")
        write_new = getattr(self.backend, "write_new", None)  # optional for a plugin's backend
        if write_new is None:
            raise StorageError(
                f"the store {self.url} ({type(self.backend).__name__}) cannot write an object "
                "only where none is, which a volume's commit needs so that no commit replaces "
                "another's: give its backend a write_new(key, data) raising FileExistsError "
                "(see portal.storage.backend), or keep volumes in a store that has one",
                details={"volume": self.name, "url": self.url},
            )
        try:
            self._call(lambda: write_new(key, signed), f"write {key}")
        except FileExistsError:
            return False
        plain = self._key("manifest")
        self._call(lambda: self.backend.write_bytes(plain, signed), f"write {plain}")
        return True

    def reload(self) -> int:
        """Make the mount match the latest committed version (uncommitted changes are replaced)."""
        root = self._mounted()
        remote = self._remote()
        local = self._local_files()
        wanted = {
            rel: entry
            for rel, entry in remote.files.items()
            if rel not in local or self._local_sha(rel, local[rel]) != entry.sha256
        }
        self._fetch(root, wanted, remote.version, checked=remote.files)
        for rel, path in local.items():
            if rel not in remote.files:
                path.unlink(missing_ok=True)
                self._seen.pop(rel, None)
        self.version, self._base = remote.version, dict(remote.files)
        return remote.version

    def _fetch(
        self,
        root: Path,
        entries: Mapping[str, VolumeFile],
        version: int,
        *,
        checked: Mapping[str, VolumeFile] | None = None,
    ) -> None:
        """Write ``entries`` of ``version`` into the mount, each checked against its hash;
        every path of ``checked`` (default: ``entries``) is checked first, and one bad path
        refuses them all with nothing written."""
        for rel in checked if checked is not None else entries:
            self._check_path(root, rel, version)

        def fetch(item: tuple[str, VolumeFile]) -> None:
            rel, entry = item
            key = self._key(f"blobs/{entry.sha256}")
            data = self._call(lambda: self.backend.read_bytes(key), f"read {key}")
            if hashlib.sha256(data).hexdigest() != entry.sha256:
                raise VolumeCorruptError(
                    f"file {rel} of volume {self.name!r} (version {version}) does not match "
                    f"its recorded hash in {self.url}: the stored copy is damaged. Commit the file "
                    "again from a machine that has it",
                    details={"volume": self.name, "path": rel},
                )
            dest = root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f"{dest.name}{_TMP}{os.getpid()}")
            tmp.write_bytes(data)
            os.chmod(tmp, entry.mode & _PERMISSIONS)
            os.replace(tmp, dest)
            info = dest.stat()
            self._seen[rel] = (info.st_size, info.st_mtime_ns, entry.sha256)

        with ThreadPoolExecutor(self.parallelism) as pool:
            list(pool.map(fetch, entries.items()))

    def _check_path(self, root: Path, rel: str, version: int) -> None:
        """Refuse a manifest path that would land outside the mount (see the module docstring)."""
        parts = rel.split("/")
        why = None
        if not rel or rel.startswith("/") or "\x00" in rel:
            why = "it is empty, absolute or holds a NUL byte"
        elif any(part in ("", ".", "..") for part in parts):
            why = "it has an empty, '.' or '..' part"
        else:
            for depth in range(1, len(parts)):
                if (root.joinpath(*parts[:depth])).is_symlink():
                    why = f"{'/'.join(parts[:depth])} in the mount is a symbolic link"
                    break
        if why is not None:
            raise VolumeCorruptError(
                f"volume {self.name!r} (version {version}) in {self.url} lists the file {rel!r}, "
                f"which would be written outside the mount at {root}: {why}. Nothing was "
                "written. Someone able to write the bucket changed the manifest, or it is "
                "damaged: commit the volume again from a machine you trust",
                details={"volume": self.name, "path": rel},
            )

    def unmount(self, *, remove: bool = False) -> None:
        """Forget the mount (``remove`` deletes the local copy; committed files stay stored)."""
        if self.mount_path is not None and remove:
            shutil.rmtree(self.mount_path, ignore_errors=True)
        self.mount_path = None

    def __repr__(self) -> str:
        return f"Volume({self.name!r}, url={self.url!r})"
